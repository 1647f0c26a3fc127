package volume

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/mkfs"
	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// StorageClass parameter names.
const (
	ParamPool        = "pool"
	ParamFATType     = "fatType"
	ParamClusterSize = "clusterSize"
	ParamLabel       = "label"
	ParamFATs        = "fats"
	ParamMode        = "mode"
	ParamAdopt       = "adopt"
	ParamReclaim     = "reclaim"
	ParamOnDamage    = "onDamage"
	ParamCodePage    = "codepage"
	ParamLayout      = "layout"
	ParamWipe        = "wipe"
	ParamMaxSize     = "maxSize"
	ParamCacheSize   = "cacheSize"
)

// Bounds of cacheSize: below the smallest the writer flushes all the time; the largest keeps one
// volume from taking a node's memory. DefaultCacheBytes is the engine's own default
// (fatvol.DefaultCacheBytes, which a test holds it to), here for the mounter pods' memory limits.
const (
	MinCacheBytes     = 4 << 20
	MaxCacheBytes     = 16 << 30
	DefaultCacheBytes = 64 << 20
)

// Write modes: how eagerly a staged volume writes back (fatvol.Options).
const (
	ModeDefault = "default" // write-back cache, flushed by the background writer, fsync and unmount
	ModeFlush   = "flush"   // also write a file back when it is closed (vfat's flush)
	ModeSync    = "sync"    // every change durable before the call returns (vfat's sync)
)

// Reclaim policies of USB volumes: what DeleteVolume leaves on the device.
const (
	ReclaimKeep = "keep" // the file system and its files stay as they are
	ReclaimWipe = "wipe" // a fresh empty file system
)

// What staging does with a volume whose file system check finds errors (a volume not cleanly
// unmounted, or damaged).
const (
	OnDamageRepair   = "repair"   // repair what is safe (fsck.Repair) and serve; anything else: serve read-only
	OnDamageReadOnly = "readonly" // write nothing; serve read-only
	OnDamageFail     = "fail"     // repair what is safe and serve; anything else: fail staging
)

// reservedParamPrefix marks parameters the Kubernetes provisioner adds itself
// (csi.storage.k8s.io/pvc/name and the like, and fstype): accepted and ignored.
const reservedParamPrefix = "csi.storage.k8s.io/"

// Params are a volume's StorageClass parameters, checked and normalized, as recorded in the
// node-local state. Two requests for the same name are compatible only with equal Params.
type Params struct {
	Pool        string `json:"pool"`
	FATType     int    `json:"fatType,omitempty"`     // 0 = by size, like mkfs.fat
	ClusterSize int    `json:"clusterSize,omitempty"` // bytes; 0 = by size
	Label       string `json:"label,omitempty"`
	FATs        int    `json:"fats,omitempty"` // 0 = 2
	Mode        string `json:"mode"`
	Adopt       bool   `json:"adopt,omitempty"`
	Reclaim     string `json:"reclaim,omitempty"`  // USB only
	OnDamage    string `json:"onDamage,omitempty"` // "" = OnDamageRepair
	CodePage    int    `json:"codepage,omitempty"` // short names' OEM code page; 0 = 437
	Layout      string `json:"layout,omitempty"`   // USB only: "mbr", or "" for a superfloppy
	Wipe        bool   `json:"wipe,omitempty"`     // USB only: format a stick that holds something else than FAT
	Selection          // USB only: which sticks may be claimed
	MaxSize     int64  `json:"maxSize,omitempty"` // bytes the volume may grow to; 0 = the default room (expand.go)
	// CacheBytes bounds the dirty file data its server holds in memory (0: the engine's
	// default); a mounter pod's memory limit follows it.
	CacheBytes int64 `json:"cacheSize,omitempty"`
}

// ParseParams checks StorageClass parameters. Unknown keys are an error, so a typo does not
// silently make a different volume than the one asked for.
func ParseParams(in map[string]string) (Params, error) {
	p := Params{Pool: PoolImage, Mode: ModeDefault}
	var unknown []string
	for key, val := range in {
		var err error
		switch key {
		case ParamPool:
			switch val {
			case PoolImage, PoolUSB:
				p.Pool = val
			case PoolMedia:
				p.Pool = PoolUSB // one pool under two names; volume IDs keep usb
			default:
				err = fmt.Errorf("want %q or %q (also %q)", PoolImage, PoolMedia, PoolUSB)
			}
		case ParamFATType:
			switch strings.ToLower(val) {
			case "auto", "":
				p.FATType = 0
			case "12", "16", "32":
				p.FATType, _ = strconv.Atoi(val)
			default:
				err = fmt.Errorf("want auto, 12, 16 or 32")
			}
		case ParamClusterSize:
			p.ClusterSize, err = parseClusterSize(val)
		case ParamLabel:
			if _, lerr := ondisk.EncodeLabel(strings.ToUpper(val)); lerr != nil {
				err = lerr
			}
			p.Label = strings.ToUpper(val)
		case ParamFATs:
			p.FATs, err = strconv.Atoi(val)
			if err == nil && (p.FATs < 1 || p.FATs > 4) {
				err = fmt.Errorf("want 1 to 4")
			}
		case ParamMode:
			switch val {
			case ModeDefault, ModeFlush, ModeSync:
				p.Mode = val
			default:
				err = fmt.Errorf("want %s, %s or %s", ModeDefault, ModeFlush, ModeSync)
			}
		case ParamAdopt:
			p.Adopt, err = strconv.ParseBool(val)
		case ParamReclaim:
			switch val {
			case ReclaimKeep, ReclaimWipe:
				p.Reclaim = val
			default:
				err = fmt.Errorf("want %s or %s", ReclaimKeep, ReclaimWipe)
			}
		case ParamOnDamage:
			switch val {
			case OnDamageRepair:
				p.OnDamage = "" // the default, recorded as such so that both spellings are one volume
			case OnDamageReadOnly, OnDamageFail:
				p.OnDamage = val
			default:
				err = fmt.Errorf("want %s, %s or %s", OnDamageRepair, OnDamageReadOnly, OnDamageFail)
			}
		case ParamCodePage:
			p.CodePage, err = parseCodePage(val)
		case ParamLayout:
			p.Layout, err = parseLayout(val)
		case ParamWipe:
			p.Wipe, err = strconv.ParseBool(val)
		case ParamVendor, ParamModel, ParamSerial, ParamByID, ParamByPath, ParamFSLabel:
			err = p.Selection.set(key, val)
		case ParamPartition:
			p.Partition, err = parsePartitionSelector(val)
		case ParamMaxSize:
			p.MaxSize, err = ParseSize(val)
		case ParamCacheSize:
			p.CacheBytes, err = ParseSize(val)
			if err == nil && (p.CacheBytes < MinCacheBytes || p.CacheBytes > MaxCacheBytes) {
				err = fmt.Errorf("want %d MiB to %d GiB", MinCacheBytes>>20, MaxCacheBytes>>30)
			}
		default:
			if !strings.HasPrefix(key, reservedParamPrefix) {
				unknown = append(unknown, key)
			}
		}
		if err != nil {
			return Params{}, fmt.Errorf("parameter %s=%q: %w", key, val, err)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Params{}, fmt.Errorf("unknown parameter(s): %s", strings.Join(unknown, ", "))
	}
	if p.Pool == PoolImage && (p.Adopt || p.Reclaim != "" || p.Layout != "" || p.Wipe || p.Selection != (Selection{})) {
		return Params{}, fmt.Errorf("parameters %s, %s, %s, %s, %s, %s, %s, %s, %s, %s and %s apply to the %s pool only",
			ParamAdopt, ParamReclaim, ParamLayout, ParamWipe, ParamVendor, ParamModel, ParamSerial, ParamByID, ParamByPath, ParamFSLabel, ParamPartition, PoolMedia)
	}
	if p.Partition != "" && !p.Adopt {
		return Params{}, fmt.Errorf("parameter %s chooses a partition of a stick whose file systems are kept, only with %s=true (a stick formatted for a new volume is claimed whole)", ParamPartition, ParamAdopt)
	}
	if p.FSLabel != "" && !p.Adopt {
		return Params{}, fmt.Errorf("parameter %s selects a stick by the label of the file system on it, kept only with %s=true", ParamFSLabel, ParamAdopt)
	}
	if p.Adopt && (p.Layout != "" || p.Wipe) {
		return Params{}, fmt.Errorf("parameters %s and %s are about a new file system and cannot go with %s=true", ParamLayout, ParamWipe, ParamAdopt)
	}
	if p.Pool == PoolUSB && p.MaxSize != 0 {
		return Params{}, fmt.Errorf("parameter %s applies to the %s pool only: a device cannot grow", ParamMaxSize, PoolImage)
	}
	if p.Pool == PoolUSB && p.Reclaim == "" {
		p.Reclaim = ReclaimKeep
	}
	if p.FATType == 0 && p.ClusterSize == 0 && p.FATs == 0 && p.Label == "" {
		return p, nil
	}
	if p.Adopt {
		// An adopted file system keeps its own geometry and label.
		return Params{}, fmt.Errorf("parameters %s, %s, %s and %s make a new file system and cannot go with %s=true",
			ParamFATType, ParamClusterSize, ParamFATs, ParamLabel, ParamAdopt)
	}
	return p, nil
}

// parseClusterSize takes bytes as a number with an optional K suffix ("4096", "4K", "4KiB"):
// a power of two from 512 bytes to 64 KiB, the range Linux mounts.
func parseClusterSize(s string) (int, error) {
	mult := 1
	t := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B")
	if strings.HasSuffix(t, "K") || strings.HasSuffix(t, "k") {
		mult, t = 1024, t[:len(t)-1]
	}
	n, err := strconv.Atoi(t)
	if err != nil {
		return 0, fmt.Errorf("want bytes, e.g. 4096 or 4K")
	}
	n *= mult
	if n < 512 || n > 64<<10 || n&(n-1) != 0 {
		return 0, fmt.Errorf("want a power of two from 512 to 65536 bytes")
	}
	return n, nil
}

// Map is the parameters as a volume context: what the volume was made with, for the record.
func (p Params) Map() map[string]string {
	m := map[string]string{ParamPool: p.Pool, ParamMode: p.Mode}
	if p.FATType != 0 {
		m[ParamFATType] = strconv.Itoa(p.FATType)
	}
	if p.ClusterSize != 0 {
		m[ParamClusterSize] = strconv.Itoa(p.ClusterSize)
	}
	if p.Label != "" {
		m[ParamLabel] = p.Label
	}
	if p.FATs != 0 {
		m[ParamFATs] = strconv.Itoa(p.FATs)
	}
	if p.Adopt {
		m[ParamAdopt] = "true"
	}
	if p.Reclaim != "" {
		m[ParamReclaim] = p.Reclaim
	}
	if p.OnDamage != "" {
		m[ParamOnDamage] = p.OnDamage
	}
	if p.CodePage != 0 {
		m[ParamCodePage] = strconv.Itoa(p.CodePage)
	}
	if p.Layout != "" {
		m[ParamLayout] = p.Layout
	}
	if p.Wipe {
		m[ParamWipe] = "true"
	}
	p.Selection.addTo(m)
	if p.MaxSize != 0 {
		m[ParamMaxSize] = strconv.FormatInt(p.MaxSize, 10)
	}
	if p.CacheBytes != 0 {
		m[ParamCacheSize] = strconv.FormatInt(p.CacheBytes, 10)
	}
	return m
}

// onDamage is the policy for a damaged volume, the default spelled out.
func (p Params) OnDamagePolicy() string {
	if p.OnDamage == "" {
		return OnDamageRepair
	}
	return p.OnDamage
}

// mkfsOptions are the formatter's options for these parameters on a device whose sectors are
// sectorSize bytes (512 for image files).
func (p Params) MkfsOptions(sectorSize int) (mkfs.Options, error) {
	o := mkfs.Options{FATType: ondisk.FATType(p.FATType), Label: p.Label, NumFATs: p.FATs}
	if p.ClusterSize != 0 {
		if p.ClusterSize < sectorSize {
			return o, fmt.Errorf("cluster size %d is smaller than the device's %d-byte sectors", p.ClusterSize, sectorSize)
		}
		o.SectorsPerCluster = p.ClusterSize / sectorSize
		if sectorSize > 512 {
			o.SectorSize = sectorSize
		}
	}
	return o, nil
}

// ParseSize reads bytes, or a quantity with a binary (Ki, Mi, Gi, Ti) or decimal (k, M, G, T)
// suffix, as Kubernetes writes sizes.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if t, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = t, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive size such as 67108864, 64Mi or 1Gi")
	}
	if n > MaxImageSize/mult {
		return 0, fmt.Errorf("larger than a FAT volume can be (%d bytes)", int64(MaxImageSize))
	}
	return n * mult, nil
}

// Image sizes.
const (
	// DefaultImageSize is the size of a volume whose request names none.
	DefaultImageSize = 1 << 30
	// MaxImageSize is the largest FAT volume with 512-byte sectors: 2^32 sectors.
	MaxImageSize = 1<<32*512 - 512
)
