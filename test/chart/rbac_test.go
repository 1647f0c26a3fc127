package chart

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// ruleSet flattens rules into "group/resource:verb" entries, so that how rules are grouped does
// not matter.
func ruleSet(rules []policyRule) []string {
	var out []string
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, fmt.Sprintf("%s/%s:%s", g, res, v))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func expand(group, resource string, verbs ...string) []string {
	var out []string
	for _, v := range verbs {
		out = append(out, fmt.Sprintf("%s/%s:%s", group, resource, v))
	}
	return out
}

// TestRBAC checks each sidecar's permissions against what it uses (csi-provisioner v6 in node
// deployment with capacity tracking and restores from snapshots, csi-resizer v2 without pod
// watching, csi-snapshotter v8 in node deployment without group snapshots), and no more.
func TestRBAC(t *testing.T) {
	r := render(t)
	sa := r.nodePlugin(t).ServiceAccountName

	wantCluster := map[string][]string{
		"csi-fat-provisioner": slices.Concat(
			expand("", "persistentvolumes", "get", "list", "watch", "create", "patch", "delete"),
			expand("", "persistentvolumeclaims", "get", "list", "watch", "update"),
			expand("storage.k8s.io", "storageclasses", "get", "list", "watch"),
			expand("", "events", "list", "watch", "create", "update", "patch"),
			expand("snapshot.storage.k8s.io", "volumesnapshots", "get", "list", "watch", "update"),
			expand("snapshot.storage.k8s.io", "volumesnapshotcontents", "get"),
		),
		"csi-fat-resizer": slices.Concat(
			expand("", "persistentvolumes", "list", "watch", "patch"),
			expand("", "persistentvolumeclaims", "list", "watch"),
			expand("", "persistentvolumeclaims/status", "patch"),
			expand("", "events", "create", "patch"),
		),
		"csi-fat-snapshotter": slices.Concat(
			expand("snapshot.storage.k8s.io", "volumesnapshotclasses", "list", "watch"),
			expand("snapshot.storage.k8s.io", "volumesnapshotcontents", "get", "list", "watch", "patch"),
			expand("snapshot.storage.k8s.io", "volumesnapshotcontents/status", "update", "patch"),
			expand("", "events", "create", "patch"),
		),
	}
	checkClusterRoles(t, r, sa, wantCluster)

	var ns role
	roleObj := r.get(t, "Role", &ns)
	if roleObj.Metadata.Namespace != namespace {
		t.Errorf("Role in namespace %q", roleObj.Metadata.Namespace)
	}
	wantNS := slices.Concat(
		expand("storage.k8s.io", "csistoragecapacities", "get", "list", "watch", "create", "update", "patch", "delete"),
		// The owner lookup reads its own pod, whose owner is the DaemonSet; the driver makes, lists
		// and removes its mounter pods.
		expand("", "pods", "get", "list", "create", "delete"),
		// The resizers' leader election.
		expand("coordination.k8s.io", "leases", "get", "watch", "list", "delete", "update", "create"),
	)
	slices.Sort(wantNS)
	if got := ruleSet(ns.Rules); !slices.Equal(got, wantNS) {
		t.Errorf("Role grants\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantNS, "\n  "))
	}
	var rb roleBinding
	r.get(t, "RoleBinding", &rb)
	checkBinding(t, "RoleBinding", rb, "Role", roleObj.Name, sa)
}

// TestRBACInProcessMounters: without mounter pods the driver's pod only reads its own pod.
func TestRBACInProcessMounters(t *testing.T) {
	r := render(t, "--set", "mounter.mode=inprocess")
	var ns role
	r.get(t, "Role", &ns)
	want := slices.Concat(
		expand("storage.k8s.io", "csistoragecapacities", "get", "list", "watch", "create", "update", "patch", "delete"),
		expand("", "pods", "get"),
		expand("coordination.k8s.io", "leases", "get", "watch", "list", "delete", "update", "create"),
	)
	slices.Sort(want)
	if got := ruleSet(ns.Rules); !slices.Equal(got, want) {
		t.Errorf("Role grants\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestRBACWithoutSnapshotsOrResizer: a sidecar switched off takes its ClusterRole and binding
// along, and the provisioner loses the snapshot rules it needs only for restores.
func TestRBACWithoutSnapshotsOrResizer(t *testing.T) {
	r := render(t, "--set", "resizer.enabled=false", "--set", "snapshotter.enabled=false")
	checkClusterRoles(t, r, r.nodePlugin(t).ServiceAccountName, map[string][]string{
		"csi-fat-provisioner": slices.Concat(
			expand("", "persistentvolumes", "get", "list", "watch", "create", "patch", "delete"),
			expand("", "persistentvolumeclaims", "get", "list", "watch", "update"),
			expand("storage.k8s.io", "storageclasses", "get", "list", "watch"),
			expand("", "events", "list", "watch", "create", "update", "patch"),
		),
	})
	// Without the resizer, no leader election and no lease.
	var ns role
	r.get(t, "Role", &ns)
	for _, rule := range ruleSet(ns.Rules) {
		if strings.HasPrefix(rule, "coordination.k8s.io/") {
			t.Errorf("Role grants %s without the resizer", rule)
		}
	}
}

// checkClusterRoles checks that the rendered ClusterRoles are exactly those of want, each with
// exactly its rules, and each bound by a ClusterRoleBinding of its own name to the node
// plugin's ServiceAccount sa.
func checkClusterRoles(t *testing.T, r rendered, sa string, want map[string][]string) {
	t.Helper()
	var names []string
	for _, o := range r.all("ClusterRole") {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	if wantNames := slices.Sorted(maps.Keys(want)); !slices.Equal(names, wantNames) {
		t.Fatalf("ClusterRoles %v, want %v", names, wantNames)
	}
	for name, rules := range want {
		var cr role
		r.named(t, "ClusterRole", name, &cr)
		rules = slices.Clone(rules)
		slices.Sort(rules)
		if got := ruleSet(cr.Rules); !slices.Equal(got, rules) {
			t.Errorf("ClusterRole %s grants\n  %s\nwant\n  %s", name, strings.Join(got, "\n  "), strings.Join(rules, "\n  "))
		}
		var rb roleBinding
		if !r.named(t, "ClusterRoleBinding", name, &rb) {
			t.Errorf("no ClusterRoleBinding %s", name)
			continue
		}
		checkBinding(t, "ClusterRoleBinding "+name, rb, "ClusterRole", name, sa)
	}
	if n, m := len(r.all("ClusterRoleBinding")), len(want); n != m {
		t.Errorf("%d ClusterRoleBindings, want %d", n, m)
	}
}

// checkBinding checks that a binding refers to the role and grants it to the ServiceAccount sa.
func checkBinding(t *testing.T, what string, rb roleBinding, roleKind, roleName, sa string) {
	t.Helper()
	if rb.RoleRef.Kind != roleKind || rb.RoleRef.Name != roleName {
		t.Errorf("%s refers to %s %s, want %s %s", what, rb.RoleRef.Kind, rb.RoleRef.Name, roleKind, roleName)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != namespace {
		t.Errorf("%s subjects %+v, want the node plugin's ServiceAccount %s/%s", what, rb.Subjects, namespace, sa)
	}
}

func TestRBACOptional(t *testing.T) {
	r := render(t, "--set", "rbac.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=fat-sa")
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} {
		if n := len(r.all(kind)); n != 0 {
			t.Errorf("%d %s rendered with rbac.create and serviceAccount.create false", n, kind)
		}
	}
	if sa := r.nodePlugin(t).ServiceAccountName; sa != "fat-sa" {
		t.Errorf("pod service account %q, want fat-sa", sa)
	}
	if err := templateFails(t, "--set", "serviceAccount.create=false"); !strings.Contains(err.Error(), "serviceAccount.name") {
		t.Errorf("error %v does not name serviceAccount.name", err)
	}
}
