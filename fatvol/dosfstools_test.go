package fatvol

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dosfstoolsImages lists dosfstools' own test images (xxd dumps) kept in ../shared, rebuilding
// each into a sparse file on demand.
func dosfstoolsImages(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "dosfstools-tests")
	dumps, _ := filepath.Glob(filepath.Join(dir, "*.xxd"))
	broken, _ := filepath.Glob(filepath.Join(dir, "*.fsck"))
	dumps = append(dumps, broken...)
	if len(dumps) == 0 {
		t.Skipf("no dosfstools test images in %s", dir)
	}
	if _, err := exec.LookPath("xxd"); err != nil {
		t.Skip("xxd is not installed (apt-get install xxd)")
	}
	return dumps
}

func rebuildImage(t *testing.T, dump string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), filepath.Base(dump)+".img")
	in, err := os.Open(dump)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var stderr strings.Builder
	cmd := exec.Command("xxd", "-r")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("xxd -r %s: %v: %s", dump, err, stderr.String())
	}
	return img
}

// TestDosfstoolsImages opens every image of dosfstools' test suite, walks it and reads every
// file. Broken images may fail with an error; none may panic or hang. The repaired and reference
// images must read without any error.
func TestDosfstoolsImages(t *testing.T) {
	for _, dump := range dosfstoolsImages(t) {
		name := filepath.Base(dump)
		t.Run(name, func(t *testing.T) {
			img := rebuildImage(t, dump)
			mustBeClean := strings.HasSuffix(name, ".xxd")
			v, err := OpenImage(img, Options{ReadOnly: true, Logger: quietLogger()})
			if err != nil {
				if mustBeClean {
					t.Fatalf("open: %v", err)
				}
				t.Logf("refused: %v", err)
				return
			}
			defer v.Close()
			var problems []error
			files := 0
			walkErr := fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					problems = append(problems, err)
					return nil
				}
				if d.IsDir() {
					return nil
				}
				files++
				f, err := v.Open(p)
				if err != nil {
					problems = append(problems, err)
					return nil
				}
				defer f.Close()
				if _, err := io.Copy(io.Discard, f); err != nil {
					problems = append(problems, err)
				}
				return nil
			})
			if walkErr != nil {
				problems = append(problems, walkErr)
			}
			if mustBeClean && len(problems) > 0 {
				t.Errorf("%d files read, problems: %v", files, errors.Join(problems...))
			}
			t.Logf("%d files, %d problems", files, len(problems))
		})
	}
}
