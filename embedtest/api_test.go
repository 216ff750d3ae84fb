package embedtest_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// publicPackages are the packages a host embeds parkway through (paths
// relative to the module root; "." is the root package). The scan covers
// every non-internal package it finds; this list only makes sure a
// rename or a move cannot silently take one of them out of the scan.
var publicPackages = []string{
	".", "metadata", "router", "shard", "reconciler", "partition", "host",
	"vfs", "vfs/errorfs", "clock", "metrics", "transport", "kafka",
}

// TestPublicAPIUsesNoInternalType fails when an exported part of a public
// package names a type of an internal package: an outside module can
// neither name nor construct such a type, so a host could not call the
// function, fill the field or implement the interface.
func TestPublicAPIUsesNoInternalType(t *testing.T) {
	root, module := moduleRoot(t)
	dirs, err := publicPackageDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range publicPackages {
		if !slices.Contains(dirs, want) {
			t.Errorf("public package %q not found under the module root (found %v)", want, dirs)
		}
	}
	var all []offence
	for _, dir := range dirs {
		found, err := scanPackage(root, module, dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		all = append(all, found...)
	}
	for _, o := range all {
		t.Errorf("%s", o)
	}
	t.Logf("scanned %d public packages, %d offence(s)", len(dirs), len(all))
}

// TestScannerFindsOffences proves the scanner on a module made for it:
// every kind of exported reference to an internal type is reported, and
// nothing that a host cannot see is.
func TestScannerFindsOffences(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	// The directory's last element differs from its package name, as the
	// scanner must read the package clause rather than guess.
	write("internal/hidden-impl/x.go", "package impl\n\ntype T struct{}\ntype I interface{ M() }\nvar V T\nfunc New() T { return T{} }\n")
	write("pub/pub.go", `package pub

import (
	"io"

	impl "example.com/m/internal/hidden-impl"
)

import x2 "example.com/m/internal/hidden-impl"

func Param(t impl.T)                {}
func Result() *impl.T               { return nil }
func Generic[P interface{ impl.I }]() {}

type S struct {
	Field   []impl.T
	Nested  struct{ Inner map[string]impl.T }
	private impl.T
	impl.I
	io.Reader
}

func (S) Method() chan impl.T { return nil }
func (S) private(impl.T)       {}

type Iface interface {
	Do(impl.T)
	impl.I
}

type Alias = impl.T
type Defined x2.T
type Func func(...impl.T)

var Typed impl.T
var Untyped = impl.New()
var Value = impl.V
var Wrapped = &impl.T{}

type hidden struct{ F impl.T }

func (hidden) Exported(impl.T) {}
func unexported(impl.T)       {}

func Body() int {
	var t impl.T
	_ = t
	return 0
}

var Err = error(nil)

type Outer struct{ inner }

type OuterIface interface{ unexpIface }

type Cycle struct{ a }

type a struct{ *b }
type b struct{ a }

func (a) Fine() int { return 0 }
`)
	// The promoted members live in another file, with its own imports.
	write("pub/inner.go", `package pub

import impl "example.com/m/internal/hidden-impl"

type inner struct {
	Promoted    impl.T
	hiddenField impl.T
}

func (inner) PromotedMethod() impl.T { return impl.T{} }
func (*inner) hiddenMethod(impl.T)    {}

type unexpIface interface {
	Hidden(impl.T)
	unexported(impl.T)
}
`)
	write("pub/pub_test.go", "package pub\n\nimport impl \"example.com/m/internal/hidden-impl\"\n\nfunc TestOnly(impl.T) {}\n")
	got, err := scanPackage(root, "example.com/m", "pub")
	if err != nil {
		t.Fatal(err)
	}
	var decls []string
	for _, o := range got {
		decls = append(decls, o.decl)
	}
	want := []string{
		"func Param", "func Result", "func Generic",
		"field S.Field", "field S.Nested", "field S.I",
		"method S.Method",
		"method Iface.Do", "interface Iface embeds",
		"type Alias", "type Defined", "type Func",
		"var Typed", "var Untyped", "var Value", "var Wrapped",
		"field Outer.Promoted", "method Outer.PromotedMethod", "method OuterIface.Hidden",
	}
	slices.Sort(decls)
	slices.Sort(want)
	if !slices.Equal(decls, want) {
		t.Errorf("offences found:\n  %s\nwant:\n  %s", strings.Join(decls, "\n  "), strings.Join(want, "\n  "))
	}
	dirs, err := publicPackageDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dirs, []string{"pub"}) {
		t.Errorf("public packages of the test module: %v, want [pub]", dirs)
	}
}

// offence is one exported declaration that names an internal type.
type offence struct {
	pos  token.Position // file relative to the module root
	decl string         // what is exported: "func F", "field S.F", ...
	ref  string         // the reference: "run.Group (github.com/.../internal/run)"
}

func (o offence) String() string {
	return fmt.Sprintf("%s: %s uses %s", o.pos, o.decl, o.ref)
}

// moduleRoot returns the module root (the parent of this package's
// directory, where go test runs it) and the module path from its go.mod.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	module, err = modulePath(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, module
}

func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New("go.mod has no module line")
}

// publicPackageDirs lists the module's directories (relative, slash
// separated, "." for the root) holding non-test Go files, leaving out
// internal trees, examples (commands, not API), testdata, hidden
// directories and nested modules.
func publicPackageDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." {
			if name == "internal" || name == "testdata" || name == "examples" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module is not this module's API
			}
		}
		files, err := goFiles(p)
		if err != nil {
			return err
		}
		if len(files) > 0 {
			dirs = append(dirs, rel)
		}
		return nil
	})
	return dirs, err
}

// goFiles lists the non-test Go files of dir.
func goFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			files = append(files, filepath.Join(dir, n))
		}
	}
	return files, nil
}

// isInternal reports whether an import path is an internal package's.
func isInternal(importPath string) bool {
	return strings.Contains(importPath, "/internal/") || strings.HasSuffix(importPath, "/internal") ||
		strings.HasPrefix(importPath, "internal/")
}

// packageName returns the name an import of importPath binds when the
// import does not rename it: the package clause of the imported
// directory when it is in this module, else the last path element
// without a major version suffix.
func packageName(root, module, importPath string) string {
	if rel, ok := strings.CutPrefix(importPath, module+"/"); ok {
		files, err := goFiles(filepath.Join(root, filepath.FromSlash(rel)))
		if err == nil && len(files) > 0 {
			if f, err := parser.ParseFile(token.NewFileSet(), files[0], nil, parser.PackageClauseOnly); err == nil {
				return f.Name.Name
			}
		}
	}
	base := path.Base(importPath)
	if strings.HasPrefix(base, "v") {
		if _, err := strconv.Atoi(base[1:]); err == nil {
			base = path.Base(path.Dir(importPath))
		}
	}
	return base
}

// scanPackage reports the offences of the package in dir (relative to
// root). It reads syntax only: a selector X.Sel in a type position, where
// X names an import of an internal package, is a reference to an internal
// type. What an exported type gets from an embedded unexported type of
// its package (promoted fields and methods, an embedded interface's
// methods) counts as the exported type's own. An exported variable
// without a declared type is judged by its value's outermost form
// (impl.V, impl.New(), impl.T{}, &impl.T{}), the forms whose type is the
// internal package's; a value merely computed with an internal package,
// such as fmt.Errorf("%w", impl.ErrX), has a public type and is not
// reported.
func scanPackage(root, module, dir string) ([]offence, error) {
	paths, err := goFiles(filepath.Join(root, filepath.FromSlash(dir)))
	if err != nil {
		return nil, err
	}
	s := &scanner{fset: token.NewFileSet(), root: root, locals: map[string]local{},
		methods: map[string][]local{}, promoting: map[string]bool{}}
	var files []*ast.File
	imports := map[*ast.File]map[string]string{}
	for _, path := range paths {
		f, err := parser.ParseFile(s.fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		imports[f] = s.internalImports(root, module, f)
	}
	// The unexported types and their exported methods, for promotion.
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && !ts.Name.IsExported() {
						s.locals[ts.Name.Name] = local{node: ts, internal: imports[f]}
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil && d.Name.IsExported() {
					if recv := receiverName(d.Recv.List[0].Type); !ast.IsExported(recv) {
						s.methods[recv] = append(s.methods[recv], local{node: d, internal: imports[f]})
					}
				}
			}
		}
	}
	for _, f := range files {
		s.internal = imports[f]
		s.file(f)
	}
	return s.out, nil
}

// scanner collects the offences of one package.
type scanner struct {
	fset      *token.FileSet
	root      string
	internal  map[string]string  // the current file's imports: name → internal import path
	locals    map[string]local   // the package's unexported types, by name
	methods   map[string][]local // their exported methods, by receiver type name
	promoting map[string]bool    // unexported types being expanded (embedding cycles)
	out       []offence
}

// local is a declaration with the internal imports of its file.
type local struct {
	node     ast.Node // *ast.TypeSpec or *ast.FuncDecl
	internal map[string]string
}

// internalImports maps the names f binds to internal packages to their
// paths, reporting dot imports of internal packages as offences.
func (s *scanner) internalImports(root, module string, f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || !isInternal(p) {
			continue
		}
		name := packageName(root, module, p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		switch name {
		case "_":
		case ".":
			s.report(imp.Pos(), "dot import", p)
		default:
			m[name] = p
		}
	}
	return m
}

func (s *scanner) report(pos token.Pos, decl, ref string) {
	p := s.fset.Position(pos)
	if rel, err := filepath.Rel(s.root, p.Filename); err == nil {
		p.Filename = filepath.ToSlash(rel)
	}
	s.out = append(s.out, offence{pos: p, decl: decl, ref: ref})
}

func (s *scanner) file(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			s.funcDecl(d)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch spec := spec.(type) {
				case *ast.TypeSpec:
					s.typeSpec(spec)
				case *ast.ValueSpec:
					s.valueSpec(d.Tok, spec)
				}
			}
		}
	}
}

func (s *scanner) funcDecl(d *ast.FuncDecl) {
	if !d.Name.IsExported() {
		return
	}
	if d.Recv == nil {
		s.expr(d.Type, "func "+d.Name.Name)
		return
	}
	recv := receiverName(d.Recv.List[0].Type)
	if !ast.IsExported(recv) {
		return // checked where an exported type embeds its receiver, if anywhere
	}
	s.expr(d.Type, "method "+recv+"."+d.Name.Name)
}

// receiverName strips pointers and type parameters off a receiver type.
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// label names a member of the type being checked: kind is "field",
// "method" or "embeds" (an interface's embedded element).
type label func(kind, member string) string

func (s *scanner) typeSpec(spec *ast.TypeSpec) {
	if !spec.Name.IsExported() {
		return
	}
	name := spec.Name.Name
	if spec.TypeParams != nil {
		s.fields(spec.TypeParams, "type "+name)
	}
	member := func(kind, m string) string {
		if kind == "embeds" {
			return "interface " + name + " embeds"
		}
		return kind + " " + name + "." + m
	}
	switch t := spec.Type.(type) {
	case *ast.StructType:
		s.structType(t, member)
	case *ast.InterfaceType:
		s.interfaceType(t, member)
	default:
		s.expr(t, "type "+name)
	}
}

// structType checks the members of a struct type a host sees: exported
// fields, named or embedded (an embedded field's name is its type's), and
// what an embedded unexported type of the package promotes.
func (s *scanner) structType(t *ast.StructType, name label) {
	for _, f := range t.Fields.List {
		if len(f.Names) > 0 {
			for _, n := range f.Names {
				if n.IsExported() {
					s.expr(f.Type, name("field", n.Name))
				}
			}
			continue
		}
		typ := f.Type
		if st, ok := typ.(*ast.StarExpr); ok {
			typ = st.X
		}
		switch x := typ.(type) {
		case *ast.SelectorExpr:
			s.expr(f.Type, name("field", x.Sel.Name))
		case *ast.Ident:
			if x.IsExported() {
				s.expr(f.Type, name("field", x.Name))
			} else {
				s.promote(x.Name, name)
			}
		default: // a generic instantiation: check it whole
			if field := receiverName(typ); ast.IsExported(field) {
				s.expr(f.Type, name("field", field))
			}
		}
	}
}

// interfaceType checks every method of an interface type with an exported
// name (an unexported one has to be implemented too, but only inside its
// package) and every embedded element, which adds its method set or
// constrains the type set; an embedded unexported interface of the
// package is expanded.
func (s *scanner) interfaceType(t *ast.InterfaceType, name label) {
	for _, m := range t.Methods.List {
		if len(m.Names) > 0 {
			for _, n := range m.Names {
				if n.IsExported() {
					s.expr(m.Type, name("method", n.Name))
				}
			}
			continue
		}
		if id, ok := m.Type.(*ast.Ident); ok && !id.IsExported() {
			s.promote(id.Name, name)
			continue
		}
		s.expr(m.Type, name("embeds", ""))
	}
}

// promote checks what the package's unexported type typ gives a type
// that embeds it: its exported fields and methods, named as the
// embedder's.
func (s *scanner) promote(typ string, name label) {
	l, ok := s.locals[typ]
	if !ok || s.promoting[typ] {
		return
	}
	s.promoting[typ] = true
	saved := s.internal
	defer func() {
		delete(s.promoting, typ)
		s.internal = saved
	}()
	s.internal = l.internal
	switch t := l.node.(*ast.TypeSpec).Type.(type) {
	case *ast.StructType:
		s.structType(t, name)
	case *ast.InterfaceType:
		s.interfaceType(t, name)
	}
	for _, m := range s.methods[typ] {
		s.internal = m.internal
		fd := m.node.(*ast.FuncDecl)
		s.expr(fd.Type, name("method", fd.Name.Name))
	}
}

func (s *scanner) valueSpec(tok token.Token, spec *ast.ValueSpec) {
	kind := "var"
	if tok == token.CONST {
		kind = "const"
	}
	for i, n := range spec.Names {
		if !n.IsExported() {
			continue
		}
		decl := kind + " " + n.Name
		if spec.Type != nil {
			s.expr(spec.Type, decl)
			continue
		}
		if i < len(spec.Values) {
			if ref, ok := s.outerInternal(spec.Values[i]); ok {
				s.report(spec.Values[i].Pos(), decl, ref)
			}
		}
	}
}

// outerInternal reports whether a value's outermost form gives it a type
// of an internal package.
func (s *scanner) outerInternal(e ast.Expr) (string, bool) {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.UnaryExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.CallExpr:
			e = x.Fun
		case *ast.CompositeLit:
			if x.Type == nil {
				return "", false
			}
			e = x.Type
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return s.selector(x)
		default:
			return "", false
		}
	}
}

func (s *scanner) selector(sel *ast.SelectorExpr) (string, bool) {
	id, ok := sel.X.(*ast.Ident)
	if !ok {
		return "", false
	}
	p, ok := s.internal[id.Name]
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s.%s (%s)", id.Name, sel.Sel.Name, p), true
}

// expr reports every reference to an internal package inside a type
// expression, under decl. Struct and interface literals met inside it are
// held to the same rule as named ones: only the members a host can see
// count.
func (s *scanner) expr(e ast.Expr, decl string) {
	same := func(string, string) string { return decl }
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if ref, ok := s.selector(x); ok {
				s.report(x.Pos(), decl, ref)
			}
			return false
		case *ast.StructType:
			s.structType(x, same)
			return false
		case *ast.InterfaceType:
			s.interfaceType(x, same)
			return false
		}
		return true
	})
}

// fields checks a field list's types (type parameter constraints).
func (s *scanner) fields(l *ast.FieldList, decl string) {
	for _, f := range l.List {
		s.expr(f.Type, decl)
	}
}
