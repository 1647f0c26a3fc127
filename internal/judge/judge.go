// Package judge runs the independent judges of the on-disk format over an image: dosfstools'
// fsck.fat -n and the project's own checker. Tests and benchmarks call it on every volume they
// wrote, so both judges hold every change to the same standard.
package judge

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
)

// ErrUnclean is wrapped by Check's error when a judge found something.
var ErrUnclean = errors.New("volume is not clean")

// FsckFat runs fsck.fat -n and returns what it complains of: every line but its banner and
// its summary. An error means it could not be run.
func FsckFat(img string) (complaints []string, err error) {
	out, err := exec.Command("fsck.fat", "-n", img).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("fsck.fat -n %s: %w", img, err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" || strings.HasPrefix(l, "fsck.fat ") || (strings.HasPrefix(l, img+": ") && strings.Contains(l, " files, ")) {
			continue
		}
		complaints = append(complaints, l)
	}
	if err != nil && len(complaints) == 0 {
		complaints = append(complaints, fmt.Sprintf("exit status %d", exit.ExitCode()))
	}
	return complaints, nil
}

// Ours runs the project's checker and returns the problems it calls errors.
func Ours(img string) ([]fsck.Problem, error) {
	dev, err := blockdev.Open(img, true)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	rep, err := fsck.Check(dev)
	if err != nil {
		return nil, fmt.Errorf("fsck.Check %s: %w", img, err)
	}
	return rep.Errors(), nil
}

// Check runs both judges and returns nil only when neither finds anything. ignore drops
// fsck.fat's lines and our problems of the given kinds that the caller expects (a volume still
// open has its dirty bit set, for example).
func Check(img string, ignore ...fsck.Kind) error {
	theirs, err := FsckFat(img)
	if err != nil {
		return err
	}
	ours, err := Ours(img)
	if err != nil {
		return err
	}
	var found []string
	for _, c := range theirs {
		if !(containsKind(ignore, fsck.Dirty) && dirtyBitLine(c)) &&
			!(containsKind(ignore, fsck.LostClusters) && lostClustersLine.MatchString(strings.TrimSpace(c))) {
			found = append(found, "fsck.fat: "+c)
		}
	}
	for _, p := range ours {
		if !containsKind(ignore, p.Kind) {
			found = append(found, "fsck.Check: "+p.String())
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("%s: %w:\n%s", img, ErrUnclean, strings.Join(found, "\n"))
	}
	return nil
}

// dirtyBitLine tells whether fsck.fat's line is about the dirty bit alone.
func dirtyBitLine(l string) bool {
	switch strings.TrimSpace(l) {
	case "Dirty bit is set. Fs was not properly unmounted and some data may be corrupt.",
		"Automatically removing dirty bit.", "Leaving filesystem unchanged.", "exit status 1":
		return true
	}
	return false
}

// lostClustersLine is fsck.fat's line about lost clusters.
var lostClustersLine = regexp.MustCompile(`^Reclaimed \d+ unused clusters? \(\d+ bytes\)( in \d+ chains?)?\.$`)

func containsKind(ks []fsck.Kind, k fsck.Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}
