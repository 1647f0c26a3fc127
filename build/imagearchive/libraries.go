package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// sharedLibraries lists the host paths of the shared libraries and the dynamic loader that the
// program at path needs, as ldd resolves them. A static program or a file that is not ELF
// (a script) needs none.
func sharedLibraries(path string) ([]string, error) {
	dynamic, err := isDynamicELF(path)
	if err != nil || !dynamic {
		return nil, err
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil, fmt.Errorf("ldd %s: %w: %s", path, err, bytes.TrimSpace(exitErr.Stderr))
		}
		return nil, fmt.Errorf("ldd %s: %w", path, err)
	}
	return parseLdd(path, out)
}

// isDynamicELF tells whether path is an ELF file with a program interpreter, i.e. one that the
// dynamic loader starts. A file that is not ELF is not an error.
func isDynamicELF(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		var formatErr *elf.FormatError
		if errors.As(err, &formatErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil // too short or wrong magic: not ELF
		}
		return false, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// parseLdd reads ldd's lines, "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the
// loader's "/lib64/ld-linux-x86-64.so.2 (0x...)"; the kernel's vDSO has no file and is skipped.
func parseLdd(program string, out []byte) ([]string, error) {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if name, found, ok := strings.Cut(line, "=>"); ok {
			found = strings.TrimSpace(found)
			if strings.HasPrefix(found, "not found") {
				return nil, fmt.Errorf("ldd %s: %s not found", program, strings.TrimSpace(name))
			}
			if path, _, _ := strings.Cut(found, " "); strings.HasPrefix(path, "/") {
				libs = append(libs, path)
			}
			continue
		}
		if path, _, _ := strings.Cut(line, " "); strings.HasPrefix(path, "/") {
			libs = append(libs, path)
		}
	}
	return libs, sc.Err()
}
