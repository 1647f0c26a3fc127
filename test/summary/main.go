// Command summary reads `go test -json` on standard input and prints what a person needs from
// a whole run: the output of every failed test and package, then how many tests passed, failed
// and skipped, and why each skipped. It exits 1 when anything failed, and, with CI=true, when a
// test skipped that is not part of a separate step (testenv.Separate): there nothing may pass
// by skipping. test/run pipes the suite through it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/csi-fat/csi-fat/internal/testenv"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
	// ImportPath names the package of build-output and build-fail events.
	ImportPath string
}

type key struct{ pkg, test string }

// skipLine is the test's own skip message in its output: "    file_test.go:12: message".
var skipLine = regexp.MustCompile(`^\s*\S+\.go:\d+: (.*)$`)

func main() {
	os.Exit(run(os.Stdin, os.Stdout, testenv.CI()))
}

func run(in io.Reader, out io.Writer, ci bool) int {
	output := map[key][]string{}
	var failed []key
	counts := map[string]int{}       // tests and subtests: pass, fail, skip
	reasons := map[string][]string{} // skip message -> tests
	var unparsed []string
	pkgs, pkgFailed := 0, 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			unparsed = append(unparsed, string(line)) // build errors come as plain text
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			unparsed = append(unparsed, strings.TrimRight(e.Output, "\n"))
		case "build-fail":
			unparsed = append(unparsed, "build failed: "+e.ImportPath)
		case "output":
			output[k] = append(output[k], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				pkgs++
				if e.Action == "fail" {
					pkgFailed++
					failed = append(failed, k)
				}
				continue
			}
			counts[e.Action]++
			switch e.Action {
			case "fail":
				failed = append(failed, k)
			case "skip":
				why := "(no message)"
				for _, l := range output[k] {
					if m := skipLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
						why = m[1]
					}
				}
				reasons[why] = append(reasons[why], shortPkg(e.Package)+"."+e.Test)
			}
			if e.Action != "fail" {
				delete(output, k)
			}
		}
	}
	if len(unparsed) > 0 {
		fmt.Fprintln(out, "== output outside the tests (build errors and the like)")
		for _, l := range unparsed {
			fmt.Fprintln(out, l)
		}
	}
	for _, k := range failed {
		name := k.test
		if name == "" {
			name = "(package)"
		}
		fmt.Fprintf(out, "== FAIL %s %s\n", k.pkg, name)
		for _, l := range output[k] {
			fmt.Fprint(out, l)
		}
	}
	unexpected, skipped := 0, 0
	if len(reasons) > 0 {
		fmt.Fprintln(out, "== skipped, and why")
		whys := make([]string, 0, len(reasons))
		for why := range reasons {
			whys = append(whys, why)
		}
		sort.Strings(whys)
		for _, why := range whys {
			tests := reasons[why]
			expected := strings.HasPrefix(why, testenv.SeparatePrefix)
			if !expected {
				unexpected += len(tests)
			}
			skipped += len(tests)
			tag := ""
			if expected {
				tag = " (expected)"
			}
			fmt.Fprintf(out, "%d%s: %s\n    %s\n", len(tests), tag, why, strings.Join(abbreviate(tests, 8), " "))
		}
	}
	status := 0
	if len(failed) > 0 || len(unparsed) > 0 && counts["pass"] == 0 {
		status = 1
	}
	if ci && unexpected > 0 {
		fmt.Fprintf(out, "CI=true: %d tests skipped outside a separate step: that is a failure here\n", unexpected)
		status = 1
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped (%d of them a separate step): tests and subtests of %d packages, %d failed\n",
		counts["pass"], counts["fail"], counts["skip"], skipped-unexpected, pkgs, pkgFailed)
	return status
}

func shortPkg(p string) string { return strings.TrimPrefix(p, "github.com/csi-fat/csi-fat/") }

func abbreviate(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}
