package fatvol

import (
	"errors"
	"io"
	"io/fs"
	"testing"

	"github.com/csi-fat/csi-fat/internal/fuzzimage"
	"github.com/csi-fat/csi-fat/internal/testenv"
)

// TestDosfstoolsImages opens every image of the classes of dosfstools' test suite (made by
// fuzzimage: clean, relabelled and with planted defects; dosfstools' own too when
// ../shared/dosfstools-tests is there), walks it and reads every file. Broken images may fail
// with an error; none may panic or hang. The clean images must read without any error.
func TestDosfstoolsImages(t *testing.T) {
	for _, im := range fuzzimage.AllImages(t, testenv.SharedDir("..")) {
		t.Run(im.Name, func(t *testing.T) {
			img := im.Path
			mustBeClean := !im.Broken
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
