package driver

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// listAll pages through ListVolumes with max entries per page and returns the IDs in order and
// the pages' sizes.
func listAll(t *testing.T, td *testDriver, max int32) (ids []string, pages []int) {
	t.Helper()
	token := ""
	for {
		resp, err := td.ctrl.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: max, StartingToken: token})
		if err != nil {
			t.Fatalf("ListVolumes(token %q): %v", token, err)
		}
		for _, e := range resp.GetEntries() {
			ids = append(ids, e.GetVolume().GetVolumeId())
		}
		pages = append(pages, len(resp.GetEntries()))
		if resp.GetNextToken() == "" {
			return ids, pages
		}
		token = resp.GetNextToken()
		if len(pages) > 100 {
			t.Fatal("ListVolumes does not end")
		}
	}
}

// TestListVolumes: every volume made here is listed once with what CreateVolume answered, in
// pages of max_entries; a page token stays good when volumes come and go between pages; a token
// ListVolumes never gave is Aborted.
func TestListVolumes(t *testing.T) {
	td := startDriver(t, "", nil)
	ctx := context.Background()
	made := map[string]*csi.Volume{}
	var want []string
	for i := 0; i < 5; i++ {
		resp, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("vol-%d", i), VolumeCapabilities: []*csi.VolumeCapability{rw},
			CapacityRange: &csi.CapacityRange{RequiredBytes: int64(i+1) << 20}, Parameters: map[string]string{"label": fmt.Sprintf("L%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		made[resp.GetVolume().GetVolumeId()] = resp.GetVolume()
		want = append(want, resp.GetVolume().GetVolumeId())
	}

	resp, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetNextToken() != "" || len(resp.GetEntries()) != len(want) {
		t.Fatalf("one page of all: %d entries, next token %q; want %d and none", len(resp.GetEntries()), resp.GetNextToken(), len(want))
	}
	for _, e := range resp.GetEntries() {
		if m := made[e.GetVolume().GetVolumeId()]; !proto.Equal(e.GetVolume(), m) {
			t.Errorf("listed %v, CreateVolume answered %v", e.GetVolume(), m)
		}
	}
	for _, max := range []int32{1, 2, 4, 5, 6} {
		ids, pages := listAll(t, td, max)
		if !slices.Equal(ids, want) {
			t.Errorf("max_entries %d: listed %v, want %v", max, ids, want)
		}
		for _, n := range pages {
			if n > int(max) {
				t.Errorf("max_entries %d: a page of %d", max, n)
			}
		}
	}

	// Between pages: the last volume of the first page goes, one before the token and one after
	// it come. The second page goes on after the token: nothing twice, none that stayed missed.
	first, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := td.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: want[1]}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vol-0a", "vol-9"} {
		if _, err := td.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rw},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}}); err != nil {
			t.Fatal(err)
		}
	}
	second, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: first.GetNextToken()})
	if err != nil {
		t.Fatalf("the token after its last volume was deleted: %v", err)
	}
	var got []string
	for _, e := range append(first.GetEntries(), second.GetEntries()...) {
		got = append(got, e.GetVolume().GetVolumeId())
	}
	wantNow := []string{want[0], want[1], want[2], want[3], want[4], "image:node-a:vol-9"}
	if !slices.Equal(got, wantNow) {
		t.Errorf("pages across changes: %v, want %v", got, wantNow)
	}

	for _, bad := range []string{"invalid-token", "after:", "after:../etc", "vol-2", "after:.hidden"} {
		if _, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: bad}); code(err) != codes.Aborted {
			t.Errorf("token %q: %v, want Aborted", bad, err)
		}
	}
	if _, err := td.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: -1}); code(err) != codes.InvalidArgument {
		t.Errorf("negative max_entries: %v, want InvalidArgument", err)
	}
}
