package doccheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	// Packages the docs' programs import that this module's own code does
	// not: importing them here has `go test` fetch their modules into the
	// module cache, where BuildGoBlocks, offline, finds them.
	_ "github.com/jackc/pgx/v5/pgxpool"
)

// TestGoBlocks compiles every ```go block of README.md and docs/**/*.md
// against this module, as a program of a user's would use it (see GoBlock
// for what a block is compiled as, and how a page marks a fragment's
// parameters or a block that cannot compile), and fails naming each block
// that does not compile, with the compiler's messages at the page's lines.
// A control block that must fail proves the build is not blind.
func TestGoBlocks(t *testing.T) {
	blocks, problems, err := GoBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	control := GoBlock{File: "control.md", Line: 1, Code: []string{"return fmt.Errorf(\"%d\", undefinedInTheControl)"}}
	all := append(slices.Clone(blocks), control)
	failed, err := BuildGoBlocks(root, t.TempDir(), all)
	if err != nil {
		t.Fatal(err)
	}
	if msg := failed[len(blocks)]; !strings.Contains(msg, "control.md:2:") || !strings.Contains(msg, "undefinedInTheControl") {
		t.Errorf("the control block compiled, or failed elsewhere: is the build blind?\n%s", msg)
	}
	compiled, skipped := 0, 0
	for i, b := range blocks {
		switch {
		case b.Skip != "":
			skipped++
		case failed[i] != "":
			as := "a whole file"
			if !b.IsFile() {
				as = fmt.Sprintf("the body of func(%s) error, the parameters from <!-- go: in func(...) -->", b.Params)
			}
			t.Errorf("%s: the ```go block does not compile as %s (see doccheck.GoBlock):\n%s", b.Where(), as, failed[i])
		default:
			compiled++
		}
	}
	t.Logf("%d ```go blocks: %d compiled, %d not compiled (with a reason), %d failing", len(blocks), compiled, skipped, len(blocks)-compiled-skipped)
	if len(blocks) < 4 {
		t.Errorf("only %d ```go blocks found: is the parser blind?", len(blocks))
	}
}

// TestParseGoBlocks: every ```go block is found, whole file or fragment;
// a marker on the line before one gives a fragment's parameters or a reason
// not to compile it; every other use of a marker is a problem at file:line.
func TestParseGoBlocks(t *testing.T) {
	page := strings.Join([]string{
		"# Page",
		"```go",
		"package main",
		"",
		"func main() {}",
		"```",
		"<!-- go: in func(ctx context.Context, poll func(context.Context) error) -->",
		"```go",
		"return poll(ctx)",
		"```",
		"<!-- go: not compiled: needs a type the reader writes -->",
		"```go",
		"var x T",
		"```",
		"- in a list:",
		"",
		"  ```go",
		"  x := 1",
		"  ```",
		"<!-- go: not compiled: -->", // 20: no reason
		"```go",
		"```",
		"<!-- go: in func(ctx context.Context -->", // 23: does not parse
		"```go",
		"```",
		"<!-- go: fragment -->", // 26: unknown
		"```go",
		"```",
		"<!-- go: in func() -->", // 29: not before a block
		"text",
		"<!-- go: in func() -->", // 31: on a block that is not go
		"```sh",
		"go test ./...",
		"```",
		"<!-- go: in func() -->", // 35: on a whole file
		"```go",
		"package p",
		"```",
		"```golang",
		"return nil",
		"```",
	}, "\n")
	blocks, problems := ParseGoBlocks("p.md", page)
	var got []string
	for _, b := range blocks {
		got = append(got, fmt.Sprintf("%s file=%v params=%q skip=%q code=%q", b.Where(), b.IsFile(), b.Params, b.Skip, b.Code))
	}
	want := []string{
		`p.md:2 file=true params="" skip="" code=["package main" "" "func main() {}"]`,
		`p.md:8 file=false params="ctx context.Context, poll func(context.Context) error" skip="" code=["return poll(ctx)"]`,
		`p.md:12 file=false params="" skip="needs a type the reader writes" code=["var x T"]`,
		`p.md:17 file=false params="" skip="" code=["x := 1"]`,
		`p.md:39 file=false params="" skip="" code=["return nil"]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, w := range []string{
		"p.md:20: go: not compiled needs a reason",
		`p.md:23: go marker "in func(ctx context.Context": write`,
		`p.md:26: go marker "fragment": write`,
		`p.md:29: go marker "in func()" is not on the line before`,
		`p.md:31: go marker "in func()" is on a block that is not`,
		`p.md:35: go marker "in func()" is on a whole file`,
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, w) }) {
			t.Errorf("no problem %q in:\n%s", w, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != 6 {
		t.Errorf("%d problems, want 6:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

// TestGoBlockSource: a fragment's imports move to the file's, it gets the
// usual ones used once (but not those of the same name it imports itself),
// its top-level variables are used after it, and its lines are the page's.
func TestGoBlockSource(t *testing.T) {
	b := GoBlock{File: "docs/x.md", Line: 10, Params: "ctx context.Context", Code: []string{
		`import "github.com/leasectl/leasectl/keys"`,
		`import log "github.com/example/log"`,
		``,
		`f, err := keys.Load("keys.yaml")`,
		`if err != nil {`,
		`	return err`,
		`}`,
		`var n int`,
	}}
	src := b.Source()
	for _, w := range []string{
		"\t\"github.com/leasectl/leasectl/keys\"\n",
		"\tlog \"github.com/example/log\"\n",
		"\t\"github.com/leasectl/leasectl/lease\"\n\t\"github.com/leasectl/leasectl/lease/leasehttp\"\n",
		"\t_ = lease.Run\n",
		"func example(ctx context.Context) error {\n//line docs/x.md:11:1\n\n\n\nf, err := keys.Load",
		"var n int\n\t_ = f\n\t_ = err\n\t_ = n\n\treturn nil\n}\n",
	} {
		if !strings.Contains(src, w) {
			t.Errorf("no %q in:\n%s", w, src)
		}
	}
	for _, no := range []string{"\t\"log\"\n", "_ = log.Println", "_ = keys.Load"} {
		if strings.Contains(src, no) {
			t.Errorf("%q in:\n%s", no, src)
		}
	}
	whole := GoBlock{File: "docs/x.md", Line: 3, Code: []string{"package main", "", "func main() {}"}}
	if got := whole.Source(); got != "//line docs/x.md:4:1\npackage main\n\nfunc main() {}\n" {
		t.Errorf("a whole file's source:\n%s", got)
	}
}
