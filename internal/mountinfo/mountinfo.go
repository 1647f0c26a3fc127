// Package mountinfo reads the kernel's table of mounts as /proc/<pid>/mountinfo shows it, the
// one source that names each mount's device number without asking the mount itself.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of the table.
type Mount struct {
	Device     string // major:minor of the mounted file system's device
	MountPoint string // unescaped
	FSType     string // fuse.fat, ext4, ...
	Source     string // unescaped
}

// Read reads the table at path (/proc/self/mountinfo, or /proc/1/mountinfo for the host's).
func Read(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ms, nil
}

// Parse reads a table in mountinfo's format; lines it cannot read are skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 0:42 / /mnt rw,nosuid shared:1 - fuse.fat /img rw,...: the device is field 3,
		// the mount point field 5, the type and source the first two after " - ".
		left, right, ok := strings.Cut(sc.Text(), " - ")
		fields, after := strings.Fields(left), strings.Fields(right)
		if !ok || len(fields) < 5 || len(after) < 2 {
			continue
		}
		out = append(out, Mount{Device: fields[2], MountPoint: Unescape(fields[4]), FSType: after[0], Source: Unescape(after[1])})
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
