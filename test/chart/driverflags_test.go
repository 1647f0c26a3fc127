package chart

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDriverKnowsEveryFlag builds cmd/csi-fat and checks that every flag the chart gives the
// driver, in every mode, is one `csi-fat driver --help` lists.
func TestDriverKnowsEveryFlag(t *testing.T) {
	helmBinary(t) // skip before the build when helm is missing
	bin := filepath.Join(t.TempDir(), "csi-fat")
	build := exec.Command("go", "build", "-o", bin, "./cmd/csi-fat")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/csi-fat: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "driver", "--help").CombinedOutput() // exit status of --help is not the point
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9_-]*)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if !known["endpoint"] || !known["pool-dir"] {
		t.Fatalf("could not read the driver's flags from its help:\n%s", help)
	}

	for _, flags := range [][]string{
		nil,
		{"--set", "registration.mode=builtin", "--set", "driver.nodeID=node-1"},
		{"--set", "mounter.mode=inprocess"},
		{"--set-json", `imagePullSecrets=[{"name":"regcred"}]`},
		{"--set", "usb.enabled=true",
			"--set-json", `usb.allow={"vendor":["a"],"model":["b"],"serial":["c"],"byId":["d"],"byPath":["e"]}`,
			"--set-json", `usb.deny={"vendor":["a"],"model":["b"],"serial":["c"],"byId":["d"],"byPath":["e"]}`,
			"--set-json", `usb.include={"byId":["f"],"byPath":["g"]}`},
		{"--set", "usb.enabled=true", "--set", "usb.discovery.enabled=true", "--set", "usb.discovery.blank=true",
			"--set-json", `usb.discovery.parameters={"mode":"flush","layout":"mbr"}`,
			"--set-json", `usb.discovery.mountOptions=["uid=1000"]`},
	} {
		driver := render(t, flags...).nodePlugin(t).container(t, "csi-fat")
		for _, arg := range driver.Args[1:] { // after the subcommand
			name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !strings.HasPrefix(arg, "-") || !known[name] {
				t.Errorf("values %v: driver argument %q is not a flag of csi-fat driver", flags, arg)
			}
		}
	}
}
