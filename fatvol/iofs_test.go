package fatvol_test

import (
	"os"
	"testing"
	"testing/fstest"
)

// expectedFiles lists the tree's files for fstest.TestFS, which checks that they exist and that
// nothing else behaves inconsistently.
func (tr *tree) expectedFiles() []string {
	return append(tr.sortedFiles(), tr.sortedDirs()...)
}

// TestIOFSEngineWritten runs io/fs's own conformance test over a volume the engine populated.
func TestIOFSEngineWritten(t *testing.T) {
	for _, spec := range []volumeSpec{fat12, fat16, fat32} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			v := openVolume(t, img)
			tr, _ := richTree(t, clusterSize(t, v), 100<<10, true)
			tr.writeToVolume(t, v)
			closeVolume(t, v)
			checkClean(t, img)

			v = openVolumeWith(t, img, readOnlyOptions)
			if err := fstest.TestFS(v, tr.expectedFiles()...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIOFSMtoolsWritten runs fstest.TestFS over a volume mtools populated.
func TestIOFSMtoolsWritten(t *testing.T) {
	requireTools(t, "mcopy")
	for _, spec := range []volumeSpec{fat12, fat32} {
		t.Run(spec.name, func(t *testing.T) {
			img := makeImage(t, spec)
			tr, _ := richTree(t, 2048, 100<<10, false)
			src := t.TempDir()
			tr.writeToHost(t, src)
			mcopyTree(t, img, src)
			checkClean(t, img)

			v := openVolumeWith(t, img, readOnlyOptions)
			if err := fstest.TestFS(v, tr.expectedFiles()...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIOFSWritable runs fstest.TestFS on a volume opened read-write, with files still open for
// writing, so the loaded nodes (not only the raw entries) are what io/fs sees.
func TestIOFSWritable(t *testing.T) {
	img := makeImage(t, fat16)
	v := openVolume(t, img)
	tr, _ := richTree(t, clusterSize(t, v), 10<<10, true)
	tr.writeToVolume(t, v)
	f, err := v.OpenFile("sizes/one", os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("appended")); err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(v, tr.expectedFiles()...); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	closeVolume(t, v)
	checkClean(t, img)
}
