package fsck

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// TestRecordsStore: records keep what was added, across chunk boundaries of both the records
// and the name arena, and give back long-name offsets, contiguous or not; a record stays 64
// bytes and free of pointers.
func TestRecordsStore(t *testing.T) {
	if s := unsafe.Sizeof(fileRec{}); s != 64 {
		t.Errorf("a record takes %d bytes, want 64", s)
	}
	var r records
	const n = 3*recordChunk + 17
	long := strings.Repeat("n", 700) // many of these cross name chunks
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("file-%d", i)
		if i%3 == 0 {
			name = long + name
		}
		var lfn []int64
		switch i % 4 {
		case 1:
			lfn = []int64{int64(i)*1024 - 2*ondisk.DirEntrySize, int64(i)*1024 - ondisk.DirEntrySize}
		case 2:
			lfn = []int64{1 << 40, int64(i)*1024 - ondisk.DirEntrySize} // begins in a cluster elsewhere
		}
		if got := r.add(fileRec{entryOff: int64(i) * 1024, parent: int32(i - 1)}, name, lfn); got != int32(i) {
			t.Fatalf("record %d added as %d", i, got)
		}
	}
	if r.len() != n {
		t.Fatalf("%d records, want %d", r.len(), n)
	}
	for i := int32(0); i < n; i++ {
		want := fmt.Sprintf("file-%d", i)
		if i%3 == 0 {
			want = long + want
		}
		f := r.at(i)
		if f.entryOff != int64(i)*1024 || f.parent != i-1 || r.name(f) != want {
			t.Fatalf("record %d: offset %d, parent %d, name %q", i, f.entryOff, f.parent, r.name(f))
		}
		got := fmt.Sprint(r.lfnOffsets(i))
		var want2 string
		switch i % 4 {
		case 1:
			want2 = fmt.Sprint([]int64{int64(i)*1024 - 2*ondisk.DirEntrySize, int64(i)*1024 - ondisk.DirEntrySize})
		case 2:
			want2 = fmt.Sprint([]int64{1 << 40, int64(i)*1024 - ondisk.DirEntrySize})
		default:
			want2 = fmt.Sprint([]int64{})
		}
		if got != want2 {
			t.Fatalf("record %d: long-name offsets %s, want %s", i, got, want2)
		}
	}
}
