// Package testenv decides what a test does when the machine lacks something it needs: a tool,
// root, /dev/fuse, loop devices, helm. On a developer's ad-hoc run (go test) the test is skipped
// with a message naming what is missing and how to get it; when CI=true (test/run and .ci/run
// set it) the same message fails the test, so nothing passes by skipping there.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// CI reports whether missing requirements fail tests (CI=true) instead of skipping them.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing skips t, or fails it when CI is true, saying what is missing.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		tb.Fatalf("CI=true and the machine lacks what this test needs: %s", msg)
	}
	tb.Skipf("needs %s (test/run installs everything; with CI=true this fails)", msg)
}

// Packages names the Debian package of each tool the tests run.
var Packages = map[string]string{
	"mkfs.fat":    "dosfstools",
	"fsck.fat":    "dosfstools",
	"fatlabel":    "dosfstools",
	"mcopy":       "mtools",
	"mmd":         "mtools",
	"mdir":        "mtools",
	"mtype":       "mtools",
	"minfo":       "mtools",
	"mlabel":      "mtools",
	"mshowfat":    "mtools",
	"mdel":        "mtools",
	"mattrib":     "mtools",
	"xxd":         "xxd",
	"fusermount3": "fuse3",
	"losetup":     "mount",
	"setpriv":     "util-linux",
	"iconv":       "libc-bin",
	"python3":     "python3-minimal",
	"sfdisk":      "fdisk",
	"blkid":       "util-linux",
	"partx":       "util-linux",
	"mkswap":      "util-linux",
	"mkfs.ext2":   "e2fsprogs",
	"mkfs.ext3":   "e2fsprogs",
	"mkfs.ext4":   "e2fsprogs",
	"mkfs.exfat":  "exfatprogs",
	"mkfs.ntfs":   "ntfs-3g",
	"xorriso":     "xorriso",
	"cryptsetup":  "cryptsetup-bin",
	"pvcreate":    "lvm2",
}

// RequireTool needs every named program on PATH.
func RequireTool(tb testing.TB, names ...string) {
	tb.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			how := "install it"
			if p, ok := Packages[name]; ok {
				how = "apt-get install " + p
			}
			Missing(tb, "%s, not found on PATH (%s)", name, how)
		}
	}
}

// RequireRoot needs root, for what: mounts, loop devices, chroot.
func RequireRoot(tb testing.TB, what string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missing(tb, "root for %s (run as root)", what)
	}
}

// RequireFUSE needs FUSE mounts: /dev/fuse and fusermount3.
func RequireFUSE(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Missing(tb, "/dev/fuse (modprobe fuse; in a container, pass --device /dev/fuse): %v", err)
	}
	RequireTool(tb, "fusermount3")
}

// RequireLoop needs loop devices: root, losetup and /dev/loop-control.
func RequireLoop(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb, "loop devices")
	RequireTool(tb, "losetup")
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		Missing(tb, "/dev/loop-control (modprobe loop; in a container, run it privileged): %v", err)
	}
}

// HelmCacheEnv names the helm binary test/run builds; without it helm is looked up on PATH,
// then in the e2e cluster's cache.
const HelmCacheEnv = "CSI_FAT_HELM"

// Helm finds the helm binary: $CSI_FAT_HELM, helm on PATH, or the local cluster's cache.
func Helm() (string, error) {
	if p := os.Getenv(HelmCacheEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", HelmCacheEnv, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p, nil
	}
	cache := os.Getenv("CSI_FAT_E2E_CACHE")
	if cache == "" {
		cache = "/var/cache/csi-fat-e2e"
	}
	p := filepath.Join(cache, "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("not in $%s, on PATH, nor at %s", HelmCacheEnv, p)
	}
	return p, nil
}

// RequireHelm needs helm and returns its path.
func RequireHelm(tb testing.TB) string {
	tb.Helper()
	p, err := Helm()
	if err != nil {
		Missing(tb, "helm, %v (test/run builds the pinned one into its cache)", err)
	}
	return p
}

// SharedDir is the directory of dosfstools' test images beside the repository
// ($CSI_FAT_DOSFSTOOLS_TESTS, else ../shared/dosfstools-tests from the repository's root), or ""
// when it is not there. They are an extra: the tests make images of the same classes themselves.
func SharedDir(repoRoot string) string {
	dir := os.Getenv("CSI_FAT_DOSFSTOOLS_TESTS")
	if dir == "" {
		dir = filepath.Join(repoRoot, "..", "shared", "dosfstools-tests")
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ""
	}
	return dir
}

// Separate skips a test that belongs to a separate, documented step (the cluster end-to-end
// tests), even with CI=true: the summary of test/run lists it as an expected skip.
func Separate(tb testing.TB, how string) {
	tb.Helper()
	tb.Skip(SeparatePrefix + how)
}

// SeparatePrefix starts the skip message of tests that belong to a separate step.
const SeparatePrefix = "separate step: "
