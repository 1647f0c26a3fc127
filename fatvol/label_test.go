package fatvol

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSetLabel sets, changes and removes a label, judged by mlabel and fsck.fat.
func TestSetLabel(t *testing.T) {
	for _, fatType := range []string{"12", "16", "32"} {
		t.Run("FAT"+fatType, func(t *testing.T) {
			img := t.TempDir() + "/label.img"
			size := map[string]string{"12": "4M", "16": "64M", "32": "64M"}[fatType]
			if out, err := exec.Command("truncate", "-s", size, img).CombinedOutput(); err != nil {
				t.Fatalf("truncate: %v: %s", err, out)
			}
			if out, err := exec.Command("mkfs.fat", "-F", fatType, img).CombinedOutput(); err != nil {
				t.Fatalf("mkfs.fat: %v: %s", err, out)
			}
			for _, label := range []string{"camera 01", "lab-07_b", "X", ""} {
				v, err := OpenImage(img, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if err := v.SetLabel(label); err != nil {
					t.Fatalf("SetLabel(%q): %v", label, err)
				}
				if got, want := v.Label(), strings.ToUpper(label); got != want {
					t.Errorf("Label() = %q after SetLabel(%q), want %q", got, label, want)
				}
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				out, err := exec.Command("mlabel", "-s", "-i", img, "::").CombinedOutput()
				if err != nil {
					t.Fatalf("mlabel -s: %v: %s", err, out)
				}
				shown := strings.TrimSpace(string(out))
				if label == "" {
					if !strings.Contains(shown, "has no label") {
						t.Errorf("mlabel shows %q after removing the label", shown)
					}
				} else if !strings.HasSuffix(shown, strings.ToUpper(label)) && !strings.Contains(shown, "is "+strings.ToUpper(label)) {
					t.Errorf("mlabel shows %q, want label %q", shown, strings.ToUpper(label))
				}
				if out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput(); err != nil {
					t.Fatalf("fsck.fat -n after label %q: %v\n%s", label, err, out)
				}
			}
		})
	}
	v, err := OpenImage(mustMkfs(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for _, bad := range []string{"TWELVE CHARS", "A*B", "a:b", "Grüße"} {
		if err := v.SetLabel(bad); err == nil {
			t.Errorf("SetLabel(%q) succeeded, want an error", bad)
		}
	}
}

func mustMkfs(t *testing.T) string {
	img := t.TempDir() + "/v.img"
	if out, err := exec.Command("truncate", "-s", "8M", img).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v: %s", err, out)
	}
	if out, err := exec.Command("mkfs.fat", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v: %s", err, out)
	}
	return img
}
