package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Staging and target paths come from the caller, and the driver mounts over them and makes and
// removes directories there. A path that reaches into the driver's own directories would hide
// the pool's images or the state behind a mount; one that reaches into another mount of a
// volume would hide that volume, or make directories inside it. Kubelet never sends such paths,
// so they are refused before anything is touched.

// checkRequestPath checks a path of a request: well formed (checkPath), and clear of the
// driver's own directories.
func (m *Manager) checkRequestPath(what, p string) error {
	if err := checkPath(what, p); err != nil {
		return err
	}
	return m.checkOwnDirs(what, p)
}

// checkOwnDirs refuses a path that is, lies inside, or contains the pool or the state directory.
func (m *Manager) checkOwnDirs(what, p string) error {
	for _, dir := range []string{m.cfg.PoolDir, m.cfg.StateDir} {
		if dir != "" && overlaps(p, dir) {
			return invalid("%s %s overlaps the driver's directory %s", what, p, dir)
		}
	}
	return nil
}

// checkOtherMounts refuses a path that overlaps where another volume is staged, or a target
// other than the caller's own. own is the volume whose request it is; target, when not "",
// is the path being published, whose own record does not count.
func (m *Manager) checkOtherMounts(what, p, own, target string) error {
	m.store.Lock()
	defer m.store.Unlock()
	for name, st := range m.store.Staged {
		if name != own && overlaps(p, st.Path) {
			return status.Errorf(codes.FailedPrecondition, "%s %s overlaps the staging path %s of volume %s", what, p, st.Path, name)
		}
	}
	for t, pub := range m.store.Published {
		if t != target && overlaps(p, t) {
			return status.Errorf(codes.FailedPrecondition, "%s %s overlaps the target %s of volume %s", what, p, t, pub.Name)
		}
	}
	return nil
}

// isStagingPath tells whether p is, lies inside, or contains where some volume is staged.
func (m *Manager) isStagingPath(p string) bool {
	m.store.Lock()
	defer m.store.Unlock()
	for _, st := range m.store.Staged {
		if overlaps(p, st.Path) {
			return true
		}
	}
	return false
}

// overlaps tells whether one of two absolute paths is the other or lies inside it, after
// resolving the symbolic links of what exists of them.
func overlaps(a, b string) bool {
	a, b = resolveExisting(a), resolveExisting(b)
	return inside(a, b) || inside(b, a)
}

// inside tells whether p is dir or lies below it.
func inside(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// resolveExisting resolves the symbolic links in the longest existing prefix of the cleaned
// path p and appends the rest. A dead mount (ENOTCONN) counts as existing as it is.
func resolveExisting(p string) string {
	p = filepath.Clean(p)
	var rest []string
	for cur := p; ; cur = filepath.Dir(cur) {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		} else if !errors.Is(err, os.ErrNotExist) || cur == filepath.Dir(cur) {
			return filepath.Join(append([]string{cur}, rest...)...)
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
	}
}
