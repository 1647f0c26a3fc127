package mountopt

import (
	"strings"
	"testing"
	"time"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
	"golang.org/x/sys/unix"
)

func TestParseOptions(t *testing.T) {
	def := DefaultOptions()
	tests := []struct {
		in    string
		check func(o Options) bool
	}{
		{"", func(o Options) bool {
			return !o.ReadOnly && o.UID == def.UID && o.GID == def.GID && o.FMask == def.FMask &&
				o.Errors == "remount-ro" && o.ShortName == ondisk.ShortNameMixed
		}},
		{"ro", func(o Options) bool { return o.ReadOnly }},
		{"ro,rw", func(o Options) bool { return !o.ReadOnly }},
		{"uid=1000,gid=100", func(o Options) bool { return o.UID == 1000 && o.GID == 100 }},
		{"umask=027", func(o Options) bool { return o.FMask == 0o027 && o.DMask == 0o027 }},
		{"umask=022,fmask=133", func(o Options) bool { return o.FMask == 0o133 && o.DMask == 0o022 }},
		{"dmask=0077,umask=0", func(o Options) bool { return o.FMask == 0 && o.DMask == 0 }},
		// allow_utime defaults to the write bits dmask leaves to group and others.
		{"dmask=002", func(o Options) bool { return o.AllowUtime == 0o020 }},
		{"allow_utime=22,dmask=022", func(o Options) bool { return o.AllowUtime == 0o022 }},
		{"shortname=winnt", func(o Options) bool {
			return o.ShortName == ondisk.ShortNameWinNT
		}},
		{"shortname=lower", func(o Options) bool { return o.ShortName == ondisk.ShortNameLower }},
		{"codepage=850", func(o Options) bool {
			return o.CodePage.Number() == 850
		}},
		{"", func(o Options) bool { return o.CodePage == nil }},
		{"shortname=win95", func(o Options) bool { return o.ShortName == ondisk.ShortNameWin95 }},
		{"flush,sync,quiet", func(o Options) bool { return o.Flush && o.Sync && o.Quiet }},
		{"errors=continue", func(o Options) bool { return o.Errors == "continue" }},
		{"allow_other", func(o Options) bool { return o.AllowOther }},
		{"nosuid,nodev,noexec,noatime,relatime", func(o Options) bool {
			return strings.Join(o.Kernel, ",") == "noexec,noatime,relatime"
		}},
		{"tz=UTC", func(o Options) bool { return o.Location == time.UTC }},
		{"time_offset=-90", func(o Options) bool {
			_, off := time.Date(2020, 1, 1, 0, 0, 0, 0, o.Location).Zone()
			return off == -90*60
		}},
		{" utf8 , iocharset=utf8 ", func(o Options) bool { return true }},
		{"check", func(o Options) bool { return o.Check && !o.Repair }},
		{"repair", func(o Options) bool { return o.Repair && !o.Check }},
		{"check,ro", func(o Options) bool { return o.Check && o.ReadOnly }},
	}
	for _, tt := range tests {
		o, err := ParseOptions(tt.in)
		if err != nil {
			t.Errorf("ParseOptions(%q): %v", tt.in, err)
			continue
		}
		if !tt.check(o) {
			t.Errorf("ParseOptions(%q) = %+v", tt.in, o)
		}
	}
}

func TestParseOptionsRefuses(t *testing.T) {
	for _, tt := range []struct{ in, mention string }{
		{"bogus", "bogus"},
		{"ro,frobnicate=1,alsobad", "frobnicate=1, alsobad"},
		{"uid=-1", "uid=-1"},
		{"uid=", "uid="},
		{"gid=abc", "gid=abc"},
		{"umask=8", "umask=8"},
		{"fmask=1777", "fmask=1777"},
		{"shortname=upper", "shortname=upper"},
		{"errors=panic", "panic"},
		{"errors=sometimes", "errors=sometimes"},
		{"tz=Europe/Paris", "tz="},
		{"iocharset=iso8859-1", "iocharset=iso8859-1"},
		{"ro=1", "ro=1"},
		{"suid", "suid"},
		{"dev", "dev"},
		{"repair,ro", "repair and ro"},
		{"check=1", "check=1"},
		{"codepage=932", "437, 850"},
		{"codepage=latin1", "codepage=latin1"},
		{"codepage=", "codepage="},
	} {
		_, err := ParseOptions(tt.in)
		if err == nil {
			t.Errorf("ParseOptions(%q) succeeded", tt.in)
			continue
		}
		if !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("ParseOptions(%q) = %v, want it to name %q", tt.in, err, tt.mention)
		}
	}
}

// TestDefaultOptionsFollowUmask checks the masks default to the process's umask, as vfat's do.
func TestDefaultOptionsFollowUmask(t *testing.T) {
	old := processUmask()
	defer setUmask(old)
	setUmask(0o037)
	o := DefaultOptions()
	if o.FMask != 0o037 || o.DMask != 0o037 {
		t.Errorf("with umask 037: fmask %o dmask %o", o.FMask, o.DMask)
	}
}

func setUmask(m uint32) { unix.Umask(int(m)) }
