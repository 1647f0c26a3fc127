package mounters

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// exitPoll is how often a mounter process is looked at for its end, beside its control
// connection and exit status; a takeover may start that much later when only this tells.
const exitPoll = 100 * time.Millisecond

// pfExiting is the kernel's PF_EXITING flag (/proc/PID/stat's flags): the process is ending.
const pfExiting = 0x4

// sigkillBit is SIGKILL in /proc/PID/status's signal masks.
const sigkillBit = 1 << (9 - 1)

// watchExit marks a mounter process dead as soon as it is being killed or ends. Its control
// connection and its exit status tell only once every thread of it has ended, and a thread of
// a killed server may wait in the kernel until the next server answers a request (a page that a
// read in flight holds): waiting for them could wait for ever.
func (p *Mounter) watchExit() {
	go func() {
		tick := time.NewTicker(exitPoll)
		defer tick.Stop()
		for {
			select {
			case <-p.gone:
				return
			case <-tick.C:
			}
			if processEnding(p.pid) {
				p.markDead()
				return
			}
		}
	}()
}

// processEnding tells whether process pid is gone, a zombie, exiting or has a SIGKILL pending.
func processEnding(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // reaped
	}
	// After the command's closing parenthesis: state, then ppid, pgrp, session, tty, tpgid, flags.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 7 {
		return false
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return true
	}
	if flags, err := strconv.ParseUint(fields[6], 10, 64); err == nil && flags&pfExiting != 0 {
		return true
	}
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&sigkillBit != 0 {
			return true
		}
	}
	return false
}
