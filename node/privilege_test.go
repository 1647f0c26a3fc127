package node

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/csi-fat/csi-fat"

// TestPrivilegedSideLeavesMediaAlone holds the node side's packages to their doc comments:
// none but node/inprocess links the engine, its checker, the FUSE server or the mounter (which
// parse what a medium holds), none calls what reads a medium's table or boot sector, and only
// node/hostmount mounts or opens /dev/fuse.
func TestPrivilegedSideLeavesMediaAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .Deps \",\"}}", module+"/node/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{"/fatvol", "/fatvol/fsck", "/fatfuse", "/mounter"}
	// What reads a medium's structures: the layout prober and reader, the boot sector's and
	// directory entries' decoders.
	readers := map[string]bool{
		"layout.Probe": true, "layout.ProbeAt": true, "layout.Open": true, "layout.Read": true,
		"layout.Find": true, "layout.Describe": true, "layout.IsFATBootSector": true,
		"ondisk.ParseBootSector": true, "ondisk.ParseFSInfo": true, "ondisk.DecodeDirEntry": true,
		"ondisk.DecodeLFN": true, "ondisk.HasSignature": true,
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, " ", 3)
		pkg, dir := f[0], f[1]
		if pkg == module+"/node/inprocess" || strings.HasSuffix(pkg, "/usbtest") {
			continue // the in-process engine; the test stand-ins for sticks
		}
		checked++
		deps := map[string]bool{}
		if len(f) == 3 {
			for _, d := range strings.Split(f[2], ",") {
				deps[d] = true
			}
		}
		for _, p := range forbidden {
			if deps[module+p] {
				t.Errorf("%s links %s, which parses media: reach it through serving.Engine", pkg, module+p)
			}
		}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			syntax, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(syntax, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok {
						name := x.Name + "." + n.Sel.Name
						if readers[name] {
							t.Errorf("%s: %s reads a medium's structures in the privileged plugin", fset.Position(n.Pos()), name)
						}
						if name == "unix.Mount" && !strings.HasSuffix(pkg, "/node/hostmount") {
							t.Errorf("%s: mount(2) outside node/hostmount", fset.Position(n.Pos()))
						}
					}
				case *ast.BasicLit:
					if n.Value == `"/dev/fuse"` && !strings.HasSuffix(pkg, "/node/hostmount") {
						t.Errorf("%s: /dev/fuse opened outside node/hostmount", fset.Position(n.Pos()))
					}
				}
				return true
			})
		}
	}
	if checked < 5 {
		t.Fatalf("only %d packages of the node side listed: %s", checked, out)
	}
}
