package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the module's root: this package is internal/lint.
const root = "../.."

// TestFuzzScriptListsEveryTarget fails when a Fuzz* function of the
// module is missing from scripts/fuzz.sh, or when the script names one
// that does not exist: plain `go test` runs only a target's seed corpus,
// so a decoder whose target the script forgets is never fuzzed in CI.
func TestFuzzScriptListsEveryTarget(t *testing.T) {
	inTree := fuzzTargets(t)
	if len(inTree) == 0 {
		t.Fatal("found no fuzz target in the module: the walk is broken")
	}
	inScript := scriptTargets(t)
	for _, tg := range inTree {
		if !slices.Contains(inScript, tg) {
			t.Errorf("scripts/fuzz.sh does not run %s: add the line %q to its targets", tg, tg)
		}
	}
	for _, tg := range inScript {
		if !slices.Contains(inTree, tg) {
			t.Errorf("scripts/fuzz.sh names %s, which is not a fuzz target of the module", tg)
		}
	}
}

// fuzzTargets lists "./pkg FuzzName" for every fuzz function in the
// module's test files (func FuzzX(*testing.F) at package level). The
// bench module and testdata are not part of the module.
func fuzzTargets(t *testing.T) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "bench" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(rel)
		if rel == "." {
			pkg = "."
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Fuzz") && takesF(fn) {
				out = append(out, pkg+" "+fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// takesF reports whether fn's only parameter is a *testing.F.
func takesF(fn *ast.FuncDecl) bool {
	ps := fn.Type.Params.List
	if len(ps) != 1 || len(ps[0].Names) > 1 {
		return false
	}
	star, ok := ps[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "testing" && sel.Sel.Name == "F"
}

// scriptTargets reads the "package target" lines of the targets list in
// scripts/fuzz.sh.
func scriptTargets(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "scripts", "fuzz.sh"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	const open = "targets='"
	i := strings.Index(s, open)
	if i < 0 {
		t.Fatalf("scripts/fuzz.sh has no %s...' list", open)
	}
	s = s[i+len(open):]
	j := strings.IndexByte(s, '\'')
	if j < 0 {
		t.Fatal("scripts/fuzz.sh: the targets list is not closed")
	}
	var out []string
	for _, line := range strings.Split(s[:j], "\n") {
		f := strings.Fields(line)
		switch len(f) {
		case 0:
		case 2:
			out = append(out, f[0]+" "+f[1])
		default:
			t.Errorf("scripts/fuzz.sh: targets line %q is not \"package target\"", line)
		}
	}
	return out
}
