package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// exported holds, for the public packages whose whole API is listed, every
// exported identifier with its signature: adding, removing or changing one
// is a decision, made here.
var exported = map[string][]string{
	module + "/keys": {
		"const MaxFileSize",
		"func Load(string) (*File, error)",
		"func Parse(string, []byte) (*File, error)",
		"type Entry struct",
		"field Entry.Name string",
		"field Entry.Key int64",
		"field Entry.Line int",
		"type File struct",
		"field File.Path string",
		"field File.Roles []Entry",
		"field File.Retired []Entry",
		"field File.RolesLine int",
		"method (*File) NamesByKey() map[int64]string",
		"method (*File) Role(string) (Entry, bool)",
		"type InvalidError struct",
		"field InvalidError.Path string",
		"field InvalidError.Problems []Problem",
		"method (*InvalidError) Error() string",
		"method (*InvalidError) Is(error) bool",
		"type NotFoundError struct",
		"field NotFoundError.Path string",
		"method (*NotFoundError) Error() string",
		"method (*NotFoundError) Is(error) bool",
		"type Problem struct",
		"field Problem.Rule string",
		"field Problem.Line int",
		"field Problem.Role string",
		"field Problem.Message string",
		"method (Problem) Location(string) string",
	},
}

// exportsOf lists the exported identifiers of the package at importPath
// (its non-test files for this platform), in the form of [exported].
func exportsOf(t *testing.T, importPath string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}\n{{range .GoFiles}}{{.}}\n{{end}}", importPath).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", importPath, err)
	}
	lines := strings.Fields(string(out))
	dir, files := lines[0], lines[1:]
	fset := token.NewFileSet()
	var names []string
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				sig := signature(d.Type)
				if d.Recv == nil {
					names = append(names, "func "+d.Name.Name+sig)
					continue
				}
				recv := d.Recv.List[0].Type
				base := recv
				if star, ok := base.(*ast.StarExpr); ok {
					base = star.X
				}
				if id, ok := base.(*ast.Ident); ok && id.IsExported() {
					names = append(names, "method ("+types.ExprString(recv)+") "+d.Name.Name+sig)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						st, ok := s.Type.(*ast.StructType)
						if !ok {
							names = append(names, "type "+s.Name.Name+" "+types.ExprString(s.Type))
							continue
						}
						names = append(names, "type "+s.Name.Name+" struct")
						for _, fl := range st.Fields.List {
							if len(fl.Names) == 0 {
								names = append(names, "embedded "+s.Name.Name+"."+types.ExprString(fl.Type))
							}
							for _, n := range fl.Names {
								if n.IsExported() {
									names = append(names, "field "+s.Name.Name+"."+n.Name+" "+types.ExprString(fl.Type))
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	return names
}

// signature renders a function's parameter and result types, without their
// names (renaming a parameter changes no API): "(string, []byte) (*File, error)".
func signature(ft *ast.FuncType) string {
	list := func(fl *ast.FieldList) []string {
		var out []string
		if fl == nil {
			return out
		}
		for _, f := range fl.List {
			for range max(len(f.Names), 1) {
				out = append(out, types.ExprString(f.Type))
			}
		}
		return out
	}
	sig := "(" + strings.Join(list(ft.Params), ", ") + ")"
	switch results := list(ft.Results); len(results) {
	case 0:
	case 1:
		sig += " " + results[0]
	default:
		sig += " (" + strings.Join(results, ", ") + ")"
	}
	return sig
}

// TestExportedIdentifiers fails when a listed package exports something
// its list lacks, or lacks something its list holds.
func TestExportedIdentifiers(t *testing.T) {
	for path, want := range exported {
		if _, ok := public[path]; !ok {
			t.Errorf("%s has a list of exports but is not a public package", path)
		}
		got := exportsOf(t, path)
		for _, g := range got {
			if !slices.Contains(want, g) {
				t.Errorf("%s exports %q, which its list in exports_test.go lacks: unexport it, or add it there (it becomes API that users may rely on)", path, g)
			}
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s no longer exports %q: a change to its API; update the list in exports_test.go if it is meant", path, w)
			}
		}
	}
}
