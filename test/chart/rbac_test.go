package chart

import (
	"fmt"
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

// TestRBAC checks the provisioner's permissions against what csi-provisioner v6 in node
// deployment with capacity tracking uses, and no more.
func TestRBAC(t *testing.T) {
	r := render(t)

	var cr role
	r.get(t, "ClusterRole", &cr)
	wantCluster := slices.Concat(
		expand("", "persistentvolumes", "get", "list", "watch", "create", "patch", "delete"),
		expand("", "persistentvolumeclaims", "get", "list", "watch", "update"),
		expand("storage.k8s.io", "storageclasses", "get", "list", "watch"),
		expand("", "events", "list", "watch", "create", "update", "patch"),
	)
	slices.Sort(wantCluster)
	if got := ruleSet(cr.Rules); !slices.Equal(got, wantCluster) {
		t.Errorf("ClusterRole grants\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantCluster, "\n  "))
	}

	var ns role
	roleObj := r.get(t, "Role", &ns)
	if roleObj.Metadata.Namespace != namespace {
		t.Errorf("Role in namespace %q", roleObj.Metadata.Namespace)
	}
	wantNS := slices.Concat(
		expand("storage.k8s.io", "csistoragecapacities", "get", "list", "watch", "create", "update", "patch", "delete"),
		expand("", "pods", "get"), // the owner lookup reads its own pod, whose owner is the DaemonSet
	)
	slices.Sort(wantNS)
	if got := ruleSet(ns.Rules); !slices.Equal(got, wantNS) {
		t.Errorf("Role grants\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantNS, "\n  "))
	}

	sa := r.nodePlugin(t).ServiceAccountName
	crObj := r.all("ClusterRole")[0]
	for _, b := range []struct {
		kind, roleKind, roleName string
	}{
		{"ClusterRoleBinding", "ClusterRole", crObj.Name},
		{"RoleBinding", "Role", roleObj.Name},
	} {
		var rb roleBinding
		r.get(t, b.kind, &rb)
		if rb.RoleRef.Kind != b.roleKind || rb.RoleRef.Name != b.roleName {
			t.Errorf("%s refers to %s %s, want %s %s", b.kind, rb.RoleRef.Kind, rb.RoleRef.Name, b.roleKind, b.roleName)
		}
		if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa || rb.Subjects[0].Namespace != namespace {
			t.Errorf("%s subjects %+v, want the node plugin's ServiceAccount %s/%s", b.kind, rb.Subjects, namespace, sa)
		}
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
