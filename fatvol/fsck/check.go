package fsck

import (
	"errors"
	"fmt"
	"io"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// Limits that keep a hostile image from costing unbounded memory or time.
const (
	maxProblems   = 10000   // problems listed; the rest are counted in Report.Omitted
	maxDirEntries = 1 << 21 // entries read from one directory (64 MiB, 32 times FAT's 65536)
	maxRecords    = 1 << 23 // entries kept in memory for the whole volume (64 bytes each, and their names)
	maxPathLen    = 4096    // bytes of a printed path
)

// checker holds the state of one check: the FAT as fsck.fat -n would have it after its
// in-memory repairs (so later steps see what a repair would leave), cluster ownership and the
// directory entries found.
type checker struct {
	dev   blockdev.Device
	boot  []byte // the boot sector as read
	bs    *ondisk.BootSector
	g     ondisk.Geometry
	rep   *Report
	fat   fatTable
	owner []uint32 // per cluster: 1 + index into files of the file that owns it; 0 if none
	recs  records
	lfn   lfnState
	// fatRaw is the bytes of the FAT copy in use as read (fatBytes of them, plus one), the
	// base onto which Repair encodes the repaired table.
	fatRaw []byte
	// fsinfo is the FSINFO sector as read (nil when there is none to repair) and its offset.
	fsinfo    []byte
	fsinfoOff int64
	unflushed bool // Repair has written since its last flush

	// Root directory volume label, found while scanning the root (fsck.fat's find_volume_de).
	label       ondisk.ShortName
	labelFound  bool
	labelOff    int64
	rootEndSeen bool
	stopped     bool // maxRecords or the memory bound reached: directory walking stopped

	// maxMemory bounds what the check holds (Options.MaxMemory; 0: no bound), fixedBytes is what
	// the FAT and its owners take of it.
	maxMemory, fixedBytes int64

	dotDots []dotDot   // '..' entries naming another cluster than their parent's, judged after the walk
	pairs   [][2]int32 // interrupted renames: the new name's record, the old one's
	// orphanLFNs are the offsets of each run of long-name entries no short entry follows.
	orphanLFNs [][]int64
}

// Options bound a check.
type Options struct {
	// MaxMemory bounds the memory the check holds for the volume, in bytes: its FAT, who owns
	// each cluster, and a 64-byte record and the name of every directory entry (0: no bound but
	// maxRecords). A FAT that does not fit fails the check (ErrMemory); entries past the bound
	// stop the walk with a Limit error, which no repair passes.
	MaxMemory int64
}

// ErrMemory is a volume whose FAT alone takes more memory than Options.MaxMemory allows.
var ErrMemory = errors.New("the check needs more memory than it may use")

// Check reads the volume on dev and reports its problems. It changes nothing. The error is
// non-nil only when the volume could not be checked at all: an I/O error, or a boot sector
// from which no FAT layout can be derived.
func Check(dev blockdev.Device) (*Report, error) { return CheckWith(dev, Options{}) }

// CheckWith is Check within the bounds of opts.
func CheckWith(dev blockdev.Device, opts Options) (*Report, error) {
	c, err := check(dev, opts)
	if err != nil {
		return nil, err
	}
	return c.rep, nil
}

// check runs a check and keeps its state, from which Repair works.
func check(dev blockdev.Device, opts Options) (*checker, error) {
	c := &checker{dev: dev, rep: &Report{}, maxMemory: opts.MaxMemory}
	if err := c.readBoot(); err != nil {
		return nil, err
	}
	if c.g.Type == ondisk.FAT32 {
		if err := c.checkBackupBoot(); err != nil {
			return nil, err
		}
	}
	if err := c.loadFAT(); err != nil {
		return nil, err
	}
	if err := c.walk(); err != nil {
		return nil, err
	}
	c.pairEmptyFiles()
	c.settleDotDots()
	c.reportRenames()
	c.checkLabel()
	c.findLostClusters()
	c.checkDirty()
	if err := c.checkFree(); err != nil {
		return nil, err
	}
	return c, nil
}

// problem records a finding; path is "" for volume-wide ones.
func (c *checker) problem(k Kind, sev Severity, path string, cluster uint32, entryOff int64, format string, args ...any) {
	if len(c.rep.Problems) >= maxProblems {
		c.rep.Omitted++
		if sev == Error {
			c.rep.omittedErrors = true
		}
		return
	}
	c.rep.Problems = append(c.rep.Problems, Problem{
		Kind: k, Severity: sev, Path: path, Detail: fmt.Sprintf(format, args...),
		Cluster: cluster, EntryOffset: entryOff, Repairable: sev == Error && repairableKinds[k],
	})
}

// notRepairable marks the problem just recorded as one Repair must not touch, for the cases
// of a repairable kind that are not safe (a FAT copy taken over from a corrupt primary, an
// FSINFO sector outside the device).
func (c *checker) notRepairable() {
	if n := len(c.rep.Problems); n > 0 {
		c.rep.Problems[n-1].Repairable = false
	}
}

// readAt reads exactly len(p) bytes at off.
func (c *checker) readAt(p []byte, off int64) error {
	n, err := c.dev.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("fsck: read %d bytes at %d: %w", len(p), off, err)
}

// readBoot decodes the boot sector and checks the fields fsck.fat's read_boot checks.
func (c *checker) readBoot() error {
	c.boot = make([]byte, 512)
	if err := c.readAt(c.boot, 0); err != nil {
		return err
	}
	bs, err := ondisk.ParseBootSector(c.boot)
	if err != nil {
		return fmt.Errorf("fsck: %w", err)
	}
	g, err := bs.Geometry(c.dev.Size())
	if err != nil {
		return fmt.Errorf("fsck: boot sector: %w", err)
	}
	c.bs, c.g = bs, g
	c.rep.Type = g.Type
	c.rep.Clusters = g.Clusters
	if !ondisk.HasSignature(c.boot) {
		// Neither fsck.fat 4.2 nor Linux requires the 0x55AA signature.
		c.problem(BootSector, Warning, "", 0, -1, "boot sector has no 0x55AA signature (found %02x %02x)", c.boot[510], c.boot[511])
	}
	if g.NumFATs > 2 {
		// fsck.fat gives up on such volumes.
		c.problem(BootSector, Error, "", 0, -1, "%d FATs; only 1 or 2 are supported", g.NumFATs)
	}
	if g.RootEntries%16 != 0 {
		c.problem(BootSector, Error, "", 0, -1, "root directory (%d entries) doesn't span an integral number of 512-byte sectors", g.RootEntries)
	}
	if g.Type == ondisk.FAT32 && g.Clusters < ondisk.MaxClustersFAT16+1 {
		c.problem(BootSector, Warning, "", 0, -1, "FAT32 layout with only %d clusters, less than the required minimum of %d", g.Clusters, ondisk.MaxClustersFAT16+1)
	}
	return nil
}

// checkBackupBoot compares the FAT32 backup boot sector with the primary, byte for byte over
// the 512 bytes fsck.fat compares. fsck.fat calls differences "mostly harmless" and leaves
// them, so they are warnings; a missing backup is an error when there is room for one,
// because fsck.fat then creates it.
func (c *checker) checkBackupBoot() error {
	bb := int64(c.bs.BackupBootSector)
	if bb == 0 {
		if c.bs.ReservedSectors < 3 {
			c.problem(BootSector, Warning, "", 0, -1, "there is no backup boot sector, and no space for creating one")
		} else {
			c.problem(BootSector, Error, "", 0, -1, "there is no backup boot sector")
		}
		return nil
	}
	off := bb * int64(c.g.SectorSize)
	backup := make([]byte, 512)
	if off+512 > c.dev.Size() {
		c.problem(BackupBootMismatch, Warning, "", 0, -1, "backup boot sector %d lies beyond the end of the device", bb)
		return nil
	}
	if err := c.readAt(backup, off); err != nil {
		return err
	}
	var diffs []string
	for i := range backup {
		if backup[i] != c.boot[i] {
			diffs = append(diffs, fmt.Sprintf("%d:%02x/%02x", i, c.boot[i], backup[i]))
		}
	}
	if len(diffs) > 0 {
		shown := diffs
		if len(shown) > 16 {
			shown = shown[:16]
		}
		more := ""
		if len(diffs) > len(shown) {
			more = fmt.Sprintf(" and %d more", len(diffs)-len(shown))
		}
		c.problem(BackupBootMismatch, Warning, "", 0, -1,
			"boot sector and its backup (sector %d) differ in %d bytes (offset:original/backup): %v%s", bb, len(diffs), shown, more)
	}
	return nil
}
