package snapshots

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/csi-fat/csi-fat/fatvol/blockdev"
	"github.com/csi-fat/csi-fat/node/mounters"
	"github.com/csi-fat/csi-fat/node/volume"
)

// holdLimit bounds how long a volume in use is held for a copy: if the copy has not ended by
// then (or the plugin hangs or dies meanwhile), applications go on and the copy is void.
const holdLimit = 10 * time.Minute

// holdMargin is how long before the hold's limit a copy of a volume in use gives up, so that
// its release comes while the volume is still held.
const holdMargin = 30 * time.Second

// copied is how a copy of a volume went.
type copied struct {
	blockdev.CopyResult
	// held is how long the volume's operations were held; 0 when it was not in use.
	held time.Duration
}

// copyVolume copies the volume's device (its image, or its USB stick) into dst, an empty file in
// the image pool, and checks the copy. A staged volume is held meanwhile (Volumes.Served): written
// back and made durable, no operation let through until the copy is made, so the copy is the
// volume of one moment with all that was written before it; a reflink makes the hold a moment,
// a sparse copy makes it last the copy. A volume that is not staged is claimed, so that no
// writer comes meanwhile. The check of the copy repairs what a copy of a volume in use holds, as
// after a crash: the dirty bit, preallocated clusters of files open for writing, clusters of
// files removed while open. budget bounds what a sparse copy may write. The caller holds the
// volume's lock.
func (sn *Snapshots) copyVolume(rec volume.Record, dst *os.File, budget int64) (copied, error) {
	devPath, err := sn.volumes.DevicePath(rec)
	if err != nil {
		return copied{}, err
	}
	length, err := sn.copyLength(rec)
	if err != nil {
		return copied{}, err
	}
	var out copied
	if hold := sn.volumes.Served(rec.Name); hold != nil {
		// The server holds the claim: read beside it, through the same page cache.
		src, err := os.Open(devPath)
		if err != nil {
			return copied{}, status.Errorf(codes.Internal, "volume %s: %v", rec.ID, err)
		}
		defer src.Close()
		release, err := hold(holdLimit)
		if errors.Is(err, mounters.ErrOld) {
			return copied{}, status.Errorf(codes.FailedPrecondition, "%v", err)
		}
		if err != nil {
			return copied{}, status.Errorf(codes.Unavailable, "%v", err)
		}
		res, cerr := blockdev.CopyImage(dst, src, length, blockdev.CopyOptions{Budget: budget, Deadline: time.Now().Add(holdLimit - holdMargin)})
		held, rerr := release()
		if cerr != nil {
			return copied{}, copyError("volume "+rec.ID, cerr)
		}
		if rerr != nil {
			return copied{}, status.Errorf(codes.Unavailable, "%v", rerr)
		}
		out = copied{CopyResult: res, held: held}
	} else {
		src, err := blockdev.OpenClaimed(devPath, blockdev.ExclusiveReadOnly)
		if err != nil {
			code := codes.Internal
			if errors.Is(err, blockdev.ErrInUse) {
				code = codes.FailedPrecondition // another writer has it: retried once it is done
			}
			return copied{}, status.Errorf(code, "volume %s: open %s to copy it: %v", rec.ID, devPath, err)
		}
		defer src.Close()
		res, err := blockdev.CopyImage(dst, src.OSFile(), length, blockdev.CopyOptions{Budget: budget})
		if err != nil {
			return copied{}, copyError("volume "+rec.ID, err)
		}
		out = copied{CopyResult: res}
	}
	if err := sn.volumes.CheckCopy(rec, dst); err != nil {
		return copied{}, err
	}
	klog.InfoS("copied volume", "volume", rec.ID, "to", dst.Name(), "reflink", out.Reflinked, "written", out.Written, "held", out.held)
	return out, nil
}

// copyError is the status for a failed copy: ResourceExhausted when the pool lacks room.
func copyError(what string, err error) error {
	if errors.Is(err, blockdev.ErrBudget) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return status.Errorf(codes.ResourceExhausted, "copy %s: the image pool lacks room: %v", what, err)
	}
	return status.Errorf(codes.Internal, "copy %s: %v", what, err)
}

// copyLength is how many bytes of a volume's device a copy takes: an image whole, a stick whole
// (its size, which is more than the volume's when its file system is in layout=mbr's partition:
// the copy keeps the table, and the image pool serves its first FAT partition). A volume in one
// partition of a stick is not copied: a copy of the whole stick would take the other volumes'
// partitions with it.
func (sn *Snapshots) copyLength(rec volume.Record) (int64, error) {
	switch {
	case rec.Device == "":
		return rec.Size, nil
	case rec.Partition != "":
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s is partition %s of removable medium %s: snapshots and clones of one partition of a stick are not supported", rec.ID, rec.Partition, rec.Device)
	case sn.usb == nil:
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s is on a usb device but the usb pool is not enabled", rec.ID)
	}
	d, err := sn.usb.Find(rec.Device)
	if err != nil {
		return 0, status.Errorf(codes.FailedPrecondition, "volume %s: %v", rec.ID, err)
	}
	return d.Size, nil
}

// makeCopy makes a file at final of size bytes: fill copies into a new file at tmp, which is grown
// to size (sparse: what lies past the copy is a hole; the file system in it stays as it was) and
// renamed to final, and the rename made durable. Nothing is left at tmp or final on failure.
func makeCopy(tmp, final string, size int64, fill func(dst *os.File) (copied, error)) (copied, error) {
	if err := os.MkdirAll(filepath.Dir(tmp), 0o700); err != nil {
		return copied{}, status.Errorf(codes.Internal, "image pool: %v", err)
	}
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return copied{}, status.Errorf(codes.Internal, "image pool: %v", err)
	}
	dst, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return copied{}, status.Errorf(codes.Internal, "image pool: %v", err)
	}
	how, err := fill(dst)
	if err == nil {
		if st, serr := dst.Stat(); serr != nil || st.Size() > size {
			err = status.Errorf(codes.Internal, "image pool: %s is not the copy it should be (%v)", tmp, serr)
		} else if st.Size() < size {
			if terr := dst.Truncate(size); terr != nil {
				err = status.Errorf(codes.Internal, "image pool: grow %s to %d bytes: %v", tmp, size, terr)
			}
		}
	}
	if err == nil {
		// The copy's writes reach the disk now, after any hold of its source.
		if serr := dst.Sync(); serr != nil {
			err = status.Errorf(codes.Internal, "image pool: %v", serr)
		}
	}
	if cerr := dst.Close(); err == nil && cerr != nil {
		err = status.Errorf(codes.Internal, "image pool: %v", cerr)
	}
	if err == nil {
		if rerr := os.Rename(tmp, final); rerr != nil {
			err = status.Errorf(codes.Internal, "image pool: %v", rerr)
		} else if serr := volume.SyncDir(filepath.Dir(final)); serr != nil {
			os.Remove(final)
			err = status.Errorf(codes.Internal, "image pool: %v", serr)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return copied{}, err
	}
	return how, nil
}
