package volume

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/csi-fat/csi-fat/fatvol/layout"
)

// ParamPartition is the StorageClass parameter that restricts which partition of a partitioned
// stick an adopting volume may take: a number (as in sdb2), a GPT partition's unique GUID, or a
// shell pattern on a GPT partition's name.
const ParamPartition = "partition"

// maxPartitionNumber bounds a partition number: GPTs have 128 entries as a rule, MBR logical
// partitions are numbered on from 5; Linux's extended devt range stops far below this.
const maxPartitionNumber = 4096

var guidPattern = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

// parsePartitionSelector checks a partition parameter's value: digits are a number, the
// 8-4-4-4-12 hex form a GUID (stored in upper case, as layout names GUIDs), anything else a shell
// pattern on GPT partition names.
func parsePartitionSelector(val string) (string, error) {
	switch {
	case val == "":
		return "", fmt.Errorf("want a partition number (1, 2, ...), a GPT partition GUID, or a pattern on GPT partition names")
	case strings.Trim(val, "0123456789") == "":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > maxPartitionNumber {
			return "", fmt.Errorf("want a partition number from 1 to %d", maxPartitionNumber)
		}
		return strconv.Itoa(n), nil
	case guidPattern.MatchString(val):
		return strings.ToUpper(val), nil
	case strings.Count(val, "-") == 4 && len(val) == 36:
		return "", fmt.Errorf("not a GUID: want 8-4-4-4-12 hex digits")
	}
	if _, err := path.Match(val, ""); err != nil {
		return "", fmt.Errorf("pattern on GPT partition names: %w", err)
	}
	return val, nil
}

// PartitionMismatch says why a partition is not the one the partition parameter names, or "".
func PartitionMismatch(sel string, p layout.Partition) string {
	switch {
	case sel == "":
		return ""
	case strings.Trim(sel, "0123456789") == "":
		if strconv.Itoa(p.Number) != sel {
			return fmt.Sprintf("partition %d is not %s=%s", p.Number, ParamPartition, sel)
		}
	case guidPattern.MatchString(sel):
		if !strings.EqualFold(p.GUID, sel) {
			return fmt.Sprintf("partition %s is not %s=%s", p.ID(), ParamPartition, sel)
		}
	default:
		if p.GUID == "" {
			return fmt.Sprintf("partition %d is an MBR partition, which has no name for %s=%q", p.Number, ParamPartition, sel)
		}
		if ok, _ := path.Match(sel, p.Name); !ok {
			return fmt.Sprintf("partition %d's name %q does not match %s=%q", p.Number, p.Name, ParamPartition, sel)
		}
	}
	return ""
}
