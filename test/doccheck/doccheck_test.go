package doccheck

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// TestLinks fails on every broken relative link or #anchor in README.md and
// docs/**/*.md, and on every link or bare URL that leaves the repository.
func TestLinks(t *testing.T) {
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d markdown files found: %v", len(files), files)
	}
	links := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		links += len(Links(string(data)))
		problems, err := Check(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
	if links < 100 {
		t.Errorf("only %d links in %d files: is the link parser blind?", links, len(files))
	}
}

// TestCheckFindsBrokenLinks runs Check on a small repository of its own:
// each broken link is reported, and nothing in code counts.
func TestCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/guide/run.md", "# `leasectl run --role ROLE`\n\n## The program's environment\n\n## Flags\n\n## Flags\n\n```sh\n# not a heading\n```\n<a id=\"custom\"></a>\n")
	write("README.md", strings.Join([]string{
		"# Title",
		"[ok](docs/guide/run.md) [ok](docs/guide/run.md#the-programs-environment) [ok](docs/guide/run.md#flags-1)",
		"[ok](docs/guide/run.md#leasectl-run---role-role) [ok](docs/guide/run.md#custom) [ok](#title) [ok](docs/)",
		"[missing file](docs/nope.md) [missing anchor](docs/guide/run.md#nope) [not a heading](docs/guide/run.md#not-a-heading)",
		"[outside](https://example.com/x) [escapes](../x.md) [own anchor](#nope) <https://example.com/auto>",
		"see http://example.com/bare for more",
		"`[in code](nope.md)` and ``[in code](nope.md)``",
		"```",
		"[in a block](nope.md) https://example.com/block",
		"```",
	}, "\n")+"\n")
	problems, err := Check(dir, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docs/nope.md", "docs/guide/run.md#nope", "#not-a-heading", "https://example.com/x", "../x.md", "\"#nope\"", "https://example.com/auto", "http://example.com/bare"}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
			t.Errorf("no problem reported for %s", w)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"leasectl keys lint|diff":                             "leasectl-keys-lintdiff",
		"From a clone: make install":                          "from-a-clone-make-install",
		"The program's environment":                           "the-programs-environment",
		"Benchmark: leading again on a new primary (Patroni)": "benchmark-leading-again-on-a-new-primary-patroni",
		"The stop fence, and what it does not cover":          "the-stop-fence-and-what-it-does-not-cover",
		"leasectl run --role ROLE [flags] -- CMD [ARGS...]":   "leasectl-run---role-role-flags----cmd-args",
		"A [linked](x.md) heading":                            "a-linked-heading",
	} {
		if got := Slug(text); got != want {
			t.Errorf("Slug(%q) = %q, want %q", text, got, want)
		}
	}
}

// TestReadmeSize keeps the README a front page.
func TestReadmeSize(t *testing.T) {
	st, err := os.Stat(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > ReadmeLimit {
		t.Errorf("README.md is %d bytes, over the limit of %d: move the detail to a page under docs/", st.Size(), ReadmeLimit)
	}
}

// TestReadmeSetupCommands keeps the README's two set-up commands true: the
// demo and the full test suite, run from a clone as written, are the scripts
// that `make demo`, `make test` and CI (.ci/run) run.
func TestReadmeSetupCommands(t *testing.T) {
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	readme := read("README.md")
	var commands []string
	inBlock := false
	sc := bufio.NewScanner(strings.NewReader(readme))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock && strings.HasPrefix(l, "./scripts/") {
			cmd, _, _ := strings.Cut(l, " ")
			commands = append(commands, cmd)
		}
	}
	if want := []string{"./scripts/demo.sh", "./scripts/test.sh"}; !slices.Equal(commands, want) {
		t.Fatalf("README's set-up commands: %v, want %v", commands, want)
	}
	for _, c := range commands {
		st, err := os.Stat(filepath.Join(root, c))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable, as the README runs it", c)
		}
	}
	if ci := read(".ci/run"); !regexp.MustCompile(`(?m)^exec bash scripts/test\.sh\b`).MatchString(ci) {
		t.Errorf(".ci/run does not run scripts/test.sh, the README's test command:\n%s", ci)
	}
	mk := read("Makefile")
	for target, script := range map[string]string{"demo": "./scripts/demo.sh", "test": "./scripts/test.sh"} {
		if !strings.Contains(mk, "\n"+target+":\n\t"+script+"\n") {
			t.Errorf("make %s does not run %s", target, script)
		}
	}
}

// TestBashCompletionNeedsPackage: the completion guide and `leasectl
// completion bash --help` (through its generated reference page) say that
// the script needs bash-completion, and what happens without it.
func TestBashCompletionNeedsPackage(t *testing.T) {
	for _, f := range []string{"docs/guide/completion.md", "docs/reference/leasectl_completion_bash.md", "docs/man/leasectl-completion-bash.1"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(data), `\-`, "-")
		for _, want := range []string{"bash-completion package", "_get_comp_words_by_ref: command not found"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", f, want)
			}
		}
	}
}

// TestMakeInstall stages `make install` in a temporary DESTDIR: the binary
// runs, every man page of docs/man is installed unchanged and is a man page
// (checked without groff, and with man when the system has it), the
// completions are where the shells look; `make uninstall` removes it all.
func TestMakeInstall(t *testing.T) {
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatal("make is not installed (Debian: apt-get install make; scripts/test.sh installs it)")
	}
	dest := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		c := exec.Command(makeBin, append([]string{"-C", root}, args...)...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("install", "DESTDIR="+dest)
	prefix := filepath.Join(dest, "usr", "local")

	bin := filepath.Join(prefix, "bin", "leasectl")
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "leasectl ") {
		t.Errorf("installed %s version: %v\n%s", bin, err, out)
	}
	for _, f := range []string{
		"share/bash-completion/completions/leasectl",
		"share/zsh/site-functions/_leasectl",
		"share/fish/vendor_completions.d/leasectl.fish",
	} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Error(err)
		}
	}

	pages, err := filepath.Glob(filepath.Join(root, "docs", "man", "*.1"))
	if err != nil || len(pages) < 10 {
		t.Fatalf("docs/man holds %d pages (%v)", len(pages), err)
	}
	manDir := filepath.Join(prefix, "share", "man", "man1")
	installed, _ := filepath.Glob(filepath.Join(manDir, "*.1"))
	if len(installed) != len(pages) {
		t.Errorf("%d man pages installed, docs/man has %d", len(installed), len(pages))
	}
	manBin, _ := exec.LookPath("man")
	for _, p := range pages {
		name := filepath.Base(p)
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(manDir, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("installed %s differs from docs/man/%s", name, name)
		}
		if err := parseMan(strings.TrimSuffix(name, ".1"), string(got)); err != "" {
			t.Errorf("%s: %s", name, err)
		}
		if manBin == "" {
			continue
		}
		c := exec.Command(manBin, "-l", filepath.Join(manDir, name))
		c.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=80", "LC_ALL=C.UTF-8")
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil {
			t.Errorf("man -l %s: %v\n%s", name, err, stderr.String())
			continue
		}
		title := strings.ToUpper(strings.TrimSuffix(name, ".1")) + "(1)"
		if text := stdout.String(); !strings.Contains(text, title) || !strings.Contains(text, "NAME") || !strings.Contains(text, "SYNOPSIS") {
			t.Errorf("man -l %s shows no %s, NAME and SYNOPSIS:\n%s", name, title, text)
		}
	}

	run("uninstall", "DESTDIR="+dest)
	var left []string
	_ = filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("make uninstall left %v", left)
	}
}

// parseMan checks, without groff, that a man page has the title line of
// section 1 under its own name, a NAME section of the form "name - what it
// does", and a SYNOPSIS.
func parseMan(name, page string) string {
	lines := strings.Split(page, "\n")
	th := -1
	for i, l := range lines {
		if strings.HasPrefix(l, ".TH ") {
			th = i
			break
		}
	}
	if th < 0 {
		return "no .TH title line"
	}
	if f := strings.Fields(lines[th]); len(f) < 3 || strings.Trim(f[1], `"`) != strings.ToUpper(name) || strings.Trim(f[2], `"`) != "1" {
		return "title line " + lines[th] + " is not section 1 of " + name
	}
	section := func(title string) int {
		for i, l := range lines {
			if strings.TrimSpace(l) == ".SH "+title || strings.TrimSpace(l) == `.SH "`+title+`"` {
				return i
			}
		}
		return -1
	}
	n := section("NAME")
	if n < 0 {
		return "no NAME section"
	}
	var body string
	for _, l := range lines[n+1:] {
		if strings.TrimSpace(l) != "" {
			body = l
			break
		}
	}
	if !strings.HasPrefix(body, name+` \- `) && !strings.HasPrefix(body, name+" - ") {
		return "NAME is " + body + ", not \"" + name + " - …\""
	}
	if section("SYNOPSIS") < 0 {
		return "no SYNOPSIS section"
	}
	return ""
}

// TestDocsNameOnlyTaggedVersions: a doc that tells a user to install,
// download or pin vX.Y.Z must name a tag of this repository; before the
// first release the docs say how to build from a clone instead.
func TestDocsNameOnlyTaggedVersions(t *testing.T) {
	out, err := exec.Command("git", "-C", root, "tag", "--list").Output()
	if err != nil {
		t.Fatalf("git tag: %v", err)
	}
	tags := map[string]bool{}
	for _, tag := range strings.Fields(string(out)) {
		tags[tag] = true
	}
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "action.yml", "examples/k8s/poller.yaml")
	version := regexp.MustCompile(`(?:@|leasectl:|VERSION=|version: )(v[0-9]+\.[0-9]+\.[0-9]+)\b`)
	for _, f := range files {
		if f == "CHANGELOG.md" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range version.FindAllStringSubmatch(line, -1) {
				if !tags[m[1]] {
					t.Errorf("%s:%d names %s, which is not a tag of this repository: %s", f, i+1, m[1], strings.TrimSpace(line))
				}
			}
		}
	}
}
