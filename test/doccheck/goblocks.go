package doccheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A GoBlock is a ```go block of a page. [BuildGoBlocks] compiles each one
// against this module, the way a user's program would use it: a block with a
// package clause is a file of its own, as it stands; any other block is a
// fragment, the body of a function that returns an error, with the
// parameters that `<!-- go: in func(PARAMS) -->` on the line before the
// fence names (none without it). A block that cannot compile says why in
// `<!-- go: not compiled: REASON -->` on the line before the fence.
type GoBlock struct {
	File   string
	Line   int      // of the opening fence
	Code   []string // the lines between the fences, without the fence's indentation
	Params string   // a fragment's parameters, from <!-- go: in func(PARAMS) -->
	Skip   string   // why it is not compiled, from <!-- go: not compiled: REASON -->
}

// Where is the block's place, as file:line.
func (b GoBlock) Where() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// IsFile says whether the block is a whole file: it has a package clause.
func (b GoBlock) IsFile() bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", strings.Join(b.Code, "\n"), parser.PackageClauseOnly)
	return err == nil
}

var (
	goMarker = regexp.MustCompile(`^<!--\s*go:\s*(.*?)\s*-->\s*$`)
	goInfo   = regexp.MustCompile(`^(?:go|golang)(?:\s|$)`)
	goParams = regexp.MustCompile(`^in\s+func\s*\((.*)\)$`)
	blockDir = regexp.MustCompile(`\b(block[0-9]{3})/`)
)

// GoBlocks returns the ```go blocks of every page Files covers, and a
// problem for each marker that breaks the rules (see GoBlock).
func GoBlocks(root string) ([]GoBlock, []string, error) {
	files, err := Files(root)
	if err != nil {
		return nil, nil, err
	}
	var all []GoBlock
	var problems []string
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, nil, err
		}
		b, p := ParseGoBlocks(f, string(data))
		all = append(all, b...)
		problems = append(problems, p...)
	}
	return all, problems, nil
}

// ParseGoBlocks returns the ```go blocks of one page's text (file names it in
// GoBlock.File and in the problems).
func ParseGoBlocks(file, text string) ([]GoBlock, []string) {
	lines := strings.Split(text, "\n")
	var out []GoBlock
	var problems []string
	problem := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: ", file, line)+fmt.Sprintf(format, args...))
	}
	pending, pendingLine := "", 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := goMarker.FindStringSubmatch(l); m != nil {
			if pending != "" {
				problem(pendingLine, "go marker %q has no ```go block under it", pending)
			}
			pending, pendingLine = m[1], i+1
			continue
		}
		f := fence.FindStringSubmatch(l)
		if f == nil {
			if strings.TrimSpace(l) != "" && pending != "" {
				problem(pendingLine, "go marker %q is not on the line before a ```go block", pending)
				pending = ""
			}
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		info := strings.TrimSpace(strings.TrimLeft(l[indent:], f[1][:1]))
		b := GoBlock{File: file, Line: i + 1}
		for i++; i < len(lines); i++ {
			c := lines[i]
			if g := fence.FindStringSubmatch(c); g != nil && g[1] == f[1] && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(c), g[1][:1])) == "" {
				break
			}
			n := 0
			for n < indent && n < len(c) && c[n] == ' ' {
				n++
			}
			b.Code = append(b.Code, c[n:])
		}
		marker := pending
		pending = ""
		if !goInfo.MatchString(info) {
			if marker != "" {
				problem(pendingLine, "go marker %q is on a block that is not ```go", marker)
			}
			continue
		}
		switch reason, skip := strings.CutPrefix(marker, "not compiled:"); {
		case marker == "":
		case skip && strings.TrimSpace(reason) == "":
			problem(pendingLine, "go: not compiled needs a reason")
			continue
		case skip:
			b.Skip = strings.TrimSpace(reason)
		case goParams.MatchString(marker):
			b.Params = goParams.FindStringSubmatch(marker)[1]
			if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _("+b.Params+") {}", 0); err != nil {
				problem(pendingLine, "go marker %q: the parameters do not parse: %v", marker, err)
				continue
			}
			if b.IsFile() {
				problem(pendingLine, "go marker %q is on a whole file (it has a package clause), which is compiled as it is", marker)
				continue
			}
		default:
			problem(pendingLine, "go marker %q: write <!-- go: in func(PARAMS) --> (the parameters a fragment uses) or <!-- go: not compiled: REASON -->", marker)
			continue
		}
		out = append(out, b)
	}
	if pending != "" {
		problem(pendingLine, "go marker %q has no ```go block under it", pending)
	}
	return out, problems
}

// An import that fragments get without asking, used once so that a
// fragment need not use it: the module's public packages, pgx (whose types
// the lease package takes) and the standard packages examples use.
type fragmentImport struct{ path, name, use string }

var fragmentImports = []fragmentImport{
	{"context", "context", "context.Background"},
	{"errors", "errors", "errors.New"},
	{"fmt", "fmt", "fmt.Sprint"},
	{"log", "log", "log.Println"},
	{"log/slog", "slog", "slog.Default"},
	{"net/http", "http", "http.NewServeMux"},
	{"os", "os", "os.Getenv"},
	{"os/signal", "signal", "signal.NotifyContext"},
	{"strings", "strings", "strings.Cut"},
	{"syscall", "syscall", "syscall.SIGTERM"},
	{"time", "time", "time.Second"},
	{"github.com/jackc/pgx/v5", "pgx", "pgx.Connect"},
	{"github.com/leasectl/leasectl/keys", "keys", "keys.Load"},
	{"github.com/leasectl/leasectl/lease", "lease", "lease.Run"},
	{"github.com/leasectl/leasectl/lease/leasehttp", "leasehttp", "leasehttp.New"},
	{"github.com/leasectl/leasectl/locks", "locks", "locks.Read"},
	{"github.com/leasectl/leasectl/probe", "probe", "probe.Run"},
	{"github.com/leasectl/leasectl/supervisor", "supervisor", "supervisor.Run"},
}

var (
	importSpec   = regexp.MustCompile(`^(?:([\pL_][\pL\pN_]*|\.)\s+)?"([^"]+)"\s*(?://.*)?$`)
	majorVersion = regexp.MustCompile(`^v[0-9]+$`)
)

// Source returns the Go file that compiles the block: the block itself when
// it is a whole file; else a package main whose function example has the
// fragment as its body. The fragment's own import lines (at its top) move
// to the file's imports, which hold those every fragment gets too
// (fragmentImports, each used once; one the fragment imports itself it
// must use, as in any Go file), and each variable the fragment declares
// at its top level is used once after it (a fragment stops where its
// reader would go on). //line comments give the compiler's messages the
// page's file and lines.
func (b GoBlock) Source() string {
	at := func(n int) string { return fmt.Sprintf("//line %s:%d:1\n", b.File, b.Line+1+n) }
	if b.IsFile() {
		return at(0) + strings.Join(b.Code, "\n") + "\n"
	}
	body := slices.Clone(b.Code)
	var own []fragmentImport // use holds the import's spec as written
	addImport := func(spec string) {
		spec = strings.TrimSpace(spec)
		m := importSpec.FindStringSubmatch(spec)
		if m == nil {
			own = append(own, fragmentImport{use: spec})
			return
		}
		name := m[1]
		if name == "" {
			name = path.Base(m[2])
			if majorVersion.MatchString(name) && strings.Contains(m[2], "/") {
				name = path.Base(path.Dir(m[2]))
			}
		}
		own = append(own, fragmentImport{path: m[2], name: name, use: spec})
	}
	inGroup := false
scan:
	for i, l := range body {
		t := strings.TrimSpace(l)
		switch {
		case inGroup:
			if t == ")" {
				inGroup = false
			} else if t != "" && !strings.HasPrefix(t, "//") {
				addImport(t)
			}
		case t == "" || strings.HasPrefix(t, "//"):
			continue
		case strings.HasPrefix(t, "import ("):
			inGroup = true
		case strings.HasPrefix(t, "import "):
			addImport(strings.TrimPrefix(t, "import "))
		default:
			break scan
		}
		body[i] = ""
	}
	var specs, uses []string
	for _, o := range own {
		specs = append(specs, o.use)
	}
	for _, fi := range fragmentImports {
		if slices.ContainsFunc(own, func(o fragmentImport) bool { return o.path == fi.path || o.name == fi.name }) {
			continue
		}
		specs = append(specs, fmt.Sprintf("%q", fi.path))
		uses = append(uses, fi.use)
	}
	file := func(declared []string) string {
		var s strings.Builder
		s.WriteString("package main\n\nimport (\n")
		for _, sp := range specs {
			fmt.Fprintf(&s, "\t%s\n", sp)
		}
		s.WriteString(")\n\nvar (\n")
		for _, u := range uses {
			fmt.Fprintf(&s, "\t_ = %s\n", u)
		}
		fmt.Fprintf(&s, ")\n\nfunc main() {}\n\nfunc example(%s) error {\n", b.Params)
		s.WriteString(at(0))
		s.WriteString(strings.Join(body, "\n"))
		s.WriteString("\n")
		for _, d := range declared {
			fmt.Fprintf(&s, "\t_ = %s\n", d)
		}
		s.WriteString("\treturn nil\n}\n")
		return s.String()
	}
	return file(topLevelVars(file(nil)))
}

// topLevelVars returns the names that the body of func example in src
// declares in its own scope (with := or var), in order; none when src does
// not parse (the compiler then says why).
func topLevelVars(src string) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "example" || fn.Body == nil {
			continue
		}
		for _, st := range fn.Body.List {
			switch st := st.(type) {
			case *ast.AssignStmt:
				if st.Tok != token.DEFINE {
					continue
				}
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			case *ast.DeclStmt:
				if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, sp := range g.Specs {
						for _, id := range sp.(*ast.ValueSpec).Names {
							add(id)
						}
					}
				}
			}
		}
	}
	return names
}

// BuildGoBlocks compiles every block that is not skipped, each as a package
// of its own in a module made in dir: a copy of root's go.mod (its
// requirements, so that nothing new is looked up) under another module
// path, which requires github.com/leasectl/leasectl and replaces it with
// root, and a copy of root's go.sum. The go command runs offline
// (GOPROXY=off, GOFLAGS=-mod=mod) on the module cache that building root
// itself fills. It returns the compiler's messages for each block that
// does not compile, by index in blocks; an error when the build fails in
// another way.
func BuildGoBlocks(root, dir string, blocks []GoBlock) (map[int]string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	gomod, err := os.ReadFile(filepath.Join(absRoot, "go.mod"))
	if err != nil {
		return nil, err
	}
	const module = "leasectl.doccheck/goblocks"
	var mod strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "module ") {
			l = "module " + module
		}
		mod.WriteString(l + "\n")
	}
	fmt.Fprintf(&mod, "\nrequire github.com/leasectl/leasectl v0.0.0-00010101000000-000000000000\n\nreplace github.com/leasectl/leasectl => %s\n", absRoot)
	sum, err := os.ReadFile(filepath.Join(absRoot, "go.sum"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	write := func(name, text string) error {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(text), 0o644)
	}
	if err := write("go.mod", mod.String()); err != nil {
		return nil, err
	}
	if err := write("go.sum", string(sum)); err != nil {
		return nil, err
	}
	// A package of the module's own, so that `go build ./...` always builds
	// more than one package and links none.
	if err := write("doc.go", "// Package goblocks holds the ```go blocks of the documentation, one per directory.\npackage goblocks\n"); err != nil {
		return nil, err
	}
	pkgs := map[string]int{}
	for i, b := range blocks {
		if b.Skip != "" {
			continue
		}
		name := fmt.Sprintf("block%03d", i)
		pkgs[module+"/"+name] = i
		if err := write(name+"/main.go", b.Source()); err != nil {
			return nil, err
		}
	}
	c := exec.Command("go", "build", "./...")
	c.Dir = dir
	c.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := c.CombinedOutput()
	if err == nil {
		return nil, nil
	}
	failed := map[int]string{}
	cur := -1
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if p, ok := strings.CutPrefix(l, "# "); ok {
			i, ok := pkgs[p]
			if !ok {
				return nil, fmt.Errorf("go build: %v\n%s", err, out)
			}
			cur = i
			continue
		}
		// The go command's own messages name the block's directory.
		if m := blockDir.FindStringSubmatch(l); m != nil {
			if i, ok := pkgs[module+"/"+m[1]]; ok {
				failed[i] += l + "\n"
				continue
			}
		}
		if cur < 0 {
			return nil, fmt.Errorf("go build: %v\n%s", err, out)
		}
		failed[cur] += l + "\n"
	}
	if len(failed) == 0 {
		return nil, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return failed, nil
}
