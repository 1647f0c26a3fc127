package chart

import "testing"

// TestLintStrict: helm lint --strict passes for the defaults and for the other value sets the
// project uses (the local cluster's, and everything optional switched on).
func TestLintStrict(t *testing.T) {
	for name, flags := range map[string][]string{
		"defaults": nil,
		"local cluster": {
			"--set", "image.tag=e2e", "--set", "image.pullPolicy=Never",
			"--set", "registration.mode=builtin",
			"--set", "usb.enabled=true", "--set", "usb.sysfsRoot=/var/lib/csi-fat-e2e/usb/sys",
			"--set", "usb.byIdDir=/var/lib/csi-fat-e2e/usb/by-id",
		},
		"all optional parts": {
			"--set", "usb.enabled=true", "--set", "metrics.service.enabled=true",
			"--set", "storageClasses.image.isDefault=true", "--set", "volumeSnapshotClass.create=true",
		},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", chartDir}, flags...)
			if out, err := runHelm(t, args...); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		})
	}
}
