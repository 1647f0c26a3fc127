package fatvol

import (
	"errors"
	"syscall"
	"testing"
)

// Clusters a removed file let go of stay allocated until the removal is durable, but they count
// as free, and a writer that needs them gets them: the removal is made durable first.
func TestQuarantinedClustersServeAllocation(t *testing.T) {
	img := mkfsImage(t, "1M", "-F", "12", "-s", "1")
	v, c := openCounting(t, img, Options{})
	st, err := v.StatFS()
	if err != nil {
		t.Fatal(err)
	}
	// One file takes every free cluster but four.
	size := int(st.FreeClusters-4) * st.ClusterSize
	writeFile := func(name string, n int) error {
		f, err := v.Create(name)
		if err != nil {
			return err
		}
		if _, err := f.Write(pattern(n, 7)); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if err := writeFile("big", size); err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := v.Remove("big"); err != nil {
		t.Fatal(err)
	}
	after, err := v.StatFS()
	if err != nil {
		t.Fatal(err)
	}
	if after.FreeClusters != st.FreeClusters {
		t.Errorf("free after the removal: %d clusters, want %d (quarantined clusters count as free)", after.FreeClusters, st.FreeClusters)
	}
	if v.order.quarantinedClusters == 0 {
		t.Fatal("the removed file's clusters were freed before its removal was durable")
	}
	flushes := c.Stats().Flushes
	if err := writeFile("again", size); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("quarantined clusters were not made available: %v", err)
		}
		t.Fatal(err)
	}
	if c.Stats().Flushes == flushes {
		t.Error("the allocation took quarantined clusters without making the removal durable")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	judgeClean(t, img)
}

// A file removed while open, with nothing else to write, still has its clusters freed on disk by
// the unmount: the flush that makes its removal count is issued even when nothing was written.
func TestOrphanFreedAtCloseWithNothingElseDirty(t *testing.T) {
	img := mkfsImage(t, "1M", "-F", "12", "-s", "1")
	v, _ := openCounting(t, img, Options{})
	f, err := v.Create("orphan")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(pattern(5000, 3)); err != nil {
		t.Fatal(err)
	}
	if err := v.Remove("orphan"); err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	judgeClean(t, img)
}
