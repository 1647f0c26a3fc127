package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/csi-fat/csi-fat/internal/testenv"
	"github.com/csi-fat/csi-fat/mounter/protocol"
)

// TestProbeMediumCommand: the built binary's hidden probe-medium command reads the medium at
// descriptor 3 (an image mkfs.fat made, a blank one) and answers as JSON; the usage does not list
// it.
func TestProbeMediumCommand(t *testing.T) {
	testenv.RequireTool(t, "mkfs.fat")
	dir := t.TempDir()
	bin := filepath.Join(dir, "csi-fat")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fat, blank := filepath.Join(dir, "fat.img"), filepath.Join(dir, "blank.img")
	for _, img := range []string{fat, blank} {
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 32<<20); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("mkfs.fat", "-n", "PROBED", fat).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.fat: %v\n%s", err, out)
	}
	for _, c := range []struct {
		img  string
		want protocol.ProbeAnswer
	}{
		{fat, protocol.ProbeAnswer{Usable: true, Table: protocol.ProbeTableSuperfloppy, FAT: &protocol.ProbePartition{Size: 32 << 20}}},
		{blank, protocol.ProbeAnswer{Blank: true, Table: protocol.ProbeTableUnknown,
			Reason: "it is blank: no partition table and no file system signature in its first sectors"}},
	} {
		f, err := os.Open(c.img)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "probe-medium", "--size=33554432", "--device="+c.img)
		cmd.ExtraFiles = []*os.File{f}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		f.Close()
		if err != nil {
			t.Fatalf("probe-medium %s: %v\n%s", c.img, err, stderr.String())
		}
		var got protocol.ProbeAnswer
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			t.Fatalf("probe-medium %s: %v: %s", c.img, err, stdout.String())
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(c.want)
		if !bytes.Equal(gj, wj) {
			t.Errorf("probe-medium %s: %s, want %s", c.img, gj, wj)
		}
	}
	out, _ := exec.Command(bin).CombinedOutput()
	if !strings.Contains(string(out), "mounter") || strings.Contains(string(out), "probe-medium") {
		t.Errorf("usage lists probe-medium, or not mounter:\n%s", out)
	}
}
