package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/csi-fat/csi-fat/fatfuse/mountopt"
	"github.com/csi-fat/csi-fat/fatvol"
	"github.com/csi-fat/csi-fat/fatvol/fsck"
)

// errNotServed is wrapped when -o check or -o repair leave errors, so the volume is not mounted.
var errNotServed = errors.New("not mounted")

// maxMountProblems bounds the problems quoted in a message at mount.
const maxMountProblems = 5

// openForMount opens the volume to be served: checked or repaired first when the options ask
// (then a clean unmount may clear the dirty bit), and with vfat's warning when it was not
// cleanly unmounted, whose dirty bit then stays for fsck to see.
func openForMount(image, partition string, opts mountopt.Options, vopts fatvol.Options, stderr io.Writer) (*fatvol.Volume, error) {
	if opts.Check || opts.Repair {
		if err := checkForMount(image, partition, opts.Repair, stderr); err != nil {
			return nil, err
		}
		vopts.Checked = true
	}
	dev, err := openMedium(image, claimFor(vopts.ReadOnly), partition, stderr, "mount")
	if err != nil {
		return nil, err
	}
	vol, err := fatvol.Open(dev, vopts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	switch {
	case vol.OpenedDirty() && vopts.Checked:
		fmt.Fprintf(stderr, "csi-fat mount: %s was not properly unmounted; the check found nothing else wrong, so a clean unmount clears the dirty bit\n", image)
	case vol.OpenedDirty():
		fmt.Fprintf(stderr, "csi-fat mount: %s: Volume was not properly unmounted. Some data may be corrupt. Please run fsck "+
			"(csi-fat fsck -a %s), or mount with -o repair. It stays marked dirty.\n", image, image)
	}
	return vol, nil
}

// checkForMount checks the file system on image (-o check) or repairs what is safe (-o repair),
// and fails unless nothing is left but the dirty bit.
func checkForMount(image, partition string, repair bool, stderr io.Writer) error {
	dev, err := openMedium(image, claimFor(!repair), partition, io.Discard, "mount")
	if err != nil {
		return err
	}
	defer dev.Close()
	if !repair {
		rep, err := fsck.Check(dev)
		if err != nil {
			return fmt.Errorf("check %s: %w", image, err)
		}
		var left []fsck.Problem
		for _, p := range rep.Errors() {
			if p.Kind != fsck.Dirty {
				left = append(left, p)
			}
		}
		if len(left) > 0 || rep.Omitted > 0 {
			return fmt.Errorf("%s: %w: the check (-o check) found errors: %s; mount with -o repair to repair what is safe, or use csi-fat fsck",
				image, errNotServed, quoteProblems(left, rep.Omitted))
		}
		return nil
	}
	res, err := fsck.Repair(dev)
	if err != nil {
		return fmt.Errorf("repair %s: %w", image, err)
	}
	if len(res.Unrepairable) > 0 {
		return fmt.Errorf("%s: %w: errors that are not safe to repair automatically, nothing written: %s; use fsck.fat on a copy",
			image, errNotServed, quoteProblems(res.Unrepairable, 0))
	}
	if res.Changed() {
		fmt.Fprintf(stderr, "csi-fat mount: %s: repaired before mounting (as fsck.fat -a would): %s\n", image, quoteProblems(res.Repaired, 0))
	}
	if !res.Clean() {
		return fmt.Errorf("%s: %w: errors left after the repair: %s", image, errNotServed, quoteProblems(res.After.Errors(), res.After.Omitted))
	}
	return nil
}

// quoteProblems lists the first problems and counts the rest.
func quoteProblems(ps []fsck.Problem, omitted int) string {
	var parts []string
	for i, p := range ps {
		if i == maxMountProblems {
			omitted += len(ps) - i
			break
		}
		parts = append(parts, p.String())
	}
	if omitted > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", omitted))
	}
	return strings.Join(parts, "; ")
}
