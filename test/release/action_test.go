package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"

	"github.com/leasectl/leasectl/test/gittest"
	"go.yaml.in/yaml/v3"
)

// actionResult is what one run of the action shows in a job's log.
type actionResult struct {
	Out  string
	Code int
}

// runAction runs scripts/action.sh the way action.yml does, in dir (the
// checked-out repository), with the action's files in this repository and
// env added to a clean GitHub environment.
func runAction(t *testing.T, dir string, env map[string]string) actionResult {
	t.Helper()
	c := exec.Command("bash", filepath.Join(repo, "scripts", "action.sh"))
	c.Dir = dir
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(name, "GITHUB_") && !strings.HasPrefix(name, "RUNNER_") && !strings.HasPrefix(name, "INPUT_") && name != "LEASECTL_RELEASE_URL" {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, "GITHUB_ACTION_PATH="+repo, "RUNNER_TEMP="+t.TempDir(), "GITHUB_PATH="+filepath.Join(t.TempDir(), "path"))
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return actionResult{Out: out.String(), Code: code}
}

func (r actionResult) want(t *testing.T, code int, lines ...string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("exit %d, want %d; output:\n%s", r.Code, code, r.Out)
	}
	for _, l := range lines {
		if !strings.Contains("\n"+r.Out, "\n"+l) {
			t.Errorf("no line starting %q in:\n%s", l, r.Out)
		}
	}
	if plainError.MatchString(r.Out) {
		t.Errorf("a plain error line, which the pull request never shows:\n%s", r.Out)
	}
}

// plainError is an error line of leasectl's own: the job's log shows it, the
// pull request never does.
var plainError = regexp.MustCompile(`(?im)^error: `)

// keysRepo builds a repository whose keys.yaml was released as v1.0.0 and
// then changed to next.
func keysRepo(t *testing.T, next string) *gittest.Repo {
	r := gittest.New(t)
	r.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
	r.Commit("keys v1")
	r.Tag("v1.0.0")
	r.Write("keys.yaml", next)
	r.Commit("change keys")
	return r
}

// TestActionFromSource runs the action the way a workflow does with
// version: source (the default): it builds leasectl from this repository,
// stamped with the action's ref, and checks real repositories with tags;
// every finding and every failure is an annotation, with keys lint's and
// keys diff's exit codes.
func TestActionFromSource(t *testing.T) {
	breaking := keysRepo(t, "roles:\n  poller: 1840000009\n")
	ref := map[string]string{"GITHUB_ACTION_REF": "v9.9.9-test"}
	res := runAction(t, breaking.Dir, ref)
	res.want(t, 1, "leasectl v9.9.9-test", "::error file=keys.yaml,line=2::KEY_CHANGED: ")

	compatible := keysRepo(t, "roles:\n  poller: 1840000001\n  scheduler: 1840000002\n")
	runAction(t, compatible.Dir, nil).want(t, 0, "::notice file=keys.yaml,line=3::ROLE_ADDED: ", "keys.yaml is compatible with v1.0.0:keys.yaml: 1 note")

	for _, tc := range []struct {
		name  string
		dir   string
		env   map[string]string
		code  int
		lines []string
	}{
		{"an explicit base", breaking.Dir, map[string]string{"INPUT_BASE": "v1.0.0"}, 1,
			[]string{"::error file=keys.yaml,line=2::KEY_CHANGED: "}},
		{"a base that does not exist", breaking.Dir, map[string]string{"INPUT_BASE": "v7.0.0"}, 2,
			[]string{`::error file=keys.yaml,title=leasectl keys diff::git ref "v7.0.0" not found`}},
		{"a missing keys file", breaking.Dir, map[string]string{"INPUT_KEYS": "deploy/keys.yaml"}, 2,
			[]string{"::error file=deploy/keys.yaml,title=leasectl keys lint::keys file deploy/keys.yaml not found"}},
		{"a shallow clone, even with allow-missing-base", gittest.Clone(t, breaking, "--depth", "1").Dir, map[string]string{"INPUT_ALLOW_MISSING_BASE": "true"}, 2,
			[]string{"::error file=keys.yaml,title=leasectl keys diff::this repository is a shallow clone"}},
		{"invalid input version", breaking.Dir, map[string]string{"INPUT_VERSION": "latest"}, 2,
			[]string{`::error title=leasectl action::invalid input version: "latest"`}},
		{"invalid input allow-missing-base", breaking.Dir, map[string]string{"INPUT_ALLOW_MISSING_BASE": "yes"}, 2,
			[]string{`::error title=leasectl action::invalid input allow-missing-base: "yes"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runAction(t, tc.dir, tc.env).want(t, tc.code, tc.lines...)
		})
	}

	t.Run("bad YAML: keys lint's problems, and no keys diff", func(t *testing.T) {
		bad := keysRepo(t, "roles: [\n")
		res := runAction(t, bad.Dir, nil)
		res.want(t, 2, "::error file=keys.yaml,line=1::YAML_SYNTAX: ")
		if strings.Count(res.Out, "::error") != 1 {
			t.Errorf("keys diff ran after keys lint failed, repeating its problems:\n%s", res.Out)
		}
	})

	t.Run("first release: no tag in the full history", func(t *testing.T) {
		first := gittest.New(t)
		first.Write("keys.yaml", "roles:\n  poller: 1840000001\n")
		first.Commit("first")
		runAction(t, first.Dir, nil).want(t, 2, "::error file=keys.yaml,title=leasectl keys diff::no tag is reachable from HEAD")
		runAction(t, first.Dir, map[string]string{"INPUT_ALLOW_MISSING_BASE": "true"}).
			want(t, 0, "::warning file=keys.yaml,title=leasectl keys diff::keys.yaml: nothing to compare with, passing because of --allow-missing-base")
	})

	t.Run("later steps find leasectl on GITHUB_PATH", func(t *testing.T) {
		pathFile := filepath.Join(t.TempDir(), "path")
		runAction(t, compatible.Dir, map[string]string{"GITHUB_PATH": pathFile}).want(t, 0)
		dir, err := os.ReadFile(pathFile)
		if err != nil {
			t.Fatal(err)
		}
		out := run(t, compatible.Dir, nil, filepath.Join(strings.TrimSpace(string(dir)), "leasectl"), "version")
		if !strings.HasPrefix(out, "leasectl ") {
			t.Errorf("leasectl version: %s", out)
		}
	})

	t.Run("no Go for a source build", func(t *testing.T) {
		// A PATH with the script's other tools, and no go.
		bin := t.TempDir()
		for _, tool := range []string{"bash", "dirname", "mkdir", "git", "uname", "cat"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		res := runAction(t, compatible.Dir, map[string]string{"PATH": bin})
		res.want(t, 3, "::error title=leasectl action::cannot build leasectl from source: go is not installed")
	})
}

// TestActionYAML checks action.yml against scripts/action.sh: a composite
// action whose step runs the script, passing each input under the name the
// script reads, with the defaults the README documents.
func TestActionYAML(t *testing.T) {
	var action struct {
		Name   string `yaml:"name"`
		Inputs map[string]struct {
			Default  string `yaml:"default"`
			Required bool   `yaml:"required"`
		} `yaml:"inputs"`
		Runs struct {
			Using string `yaml:"using"`
			Steps []struct {
				If   string            `yaml:"if"`
				Uses string            `yaml:"uses"`
				Run  string            `yaml:"run"`
				With map[string]string `yaml:"with"`
				Env  map[string]string `yaml:"env"`
			} `yaml:"steps"`
		} `yaml:"runs"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "action.yml")), &action); err != nil {
		t.Fatal(err)
	}
	if action.Runs.Using != "composite" {
		t.Errorf("runs.using %q, want composite", action.Runs.Using)
	}
	wantDefaults := map[string]string{"keys": "keys.yaml", "base": "", "version": "source", "allow-missing-base": "false"}
	for name, def := range wantDefaults {
		in, ok := action.Inputs[name]
		if !ok || in.Default != def || in.Required {
			t.Errorf("input %s: %+v, want optional with default %q", name, in, def)
		}
	}
	script := readFile(t, "scripts/action.sh")
	ran := false
	for _, s := range action.Runs.Steps {
		if !strings.Contains(s.Run, "$GITHUB_ACTION_PATH/scripts/action.sh") {
			continue
		}
		ran = true
		for name := range action.Inputs {
			env := "INPUT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
			if s.Env[env] != "${{ inputs."+name+" }}" {
				t.Errorf("the step passes %s as %q, want ${{ inputs.%s }}", env, s.Env[env], name)
			}
			if !strings.Contains(script, env) {
				t.Errorf("scripts/action.sh does not read %s", env)
			}
		}
	}
	if !ran {
		t.Error("no step runs scripts/action.sh")
	}
	// A source build needs Go, set up from go.mod, only then.
	setup := false
	for _, s := range action.Runs.Steps {
		if strings.HasPrefix(s.Uses, "actions/setup-go@") && s.If == "inputs.version == 'source'" && strings.HasSuffix(s.With["go-version-file"], "/go.mod") {
			setup = true
		}
	}
	if !setup {
		t.Error("no actions/setup-go step for version: source")
	}
}

// goreleaserNames renders .goreleaser.yaml's archive and checksum name
// templates (plain field references, which text/template renders as
// goreleaser does) for a version and platform.
func goreleaserNames(t *testing.T, version, goos, goarch string) (archive, checksums string) {
	t.Helper()
	var cfg struct {
		ProjectName string `yaml:"project_name"`
		Archives    []struct {
			Formats         []string `yaml:"formats"`
			NameTemplate    string   `yaml:"name_template"`
			FormatOverrides []struct {
				Goos    string   `yaml:"goos"`
				Formats []string `yaml:"formats"`
			} `yaml:"format_overrides"`
		} `yaml:"archives"`
		Checksum struct {
			NameTemplate string `yaml:"name_template"`
		} `yaml:"checksum"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, ".goreleaser.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Archives) != 1 {
		t.Fatalf("want one archive configuration, got %d", len(cfg.Archives))
	}
	a := cfg.Archives[0]
	data := map[string]string{"ProjectName": cfg.ProjectName, "Version": strings.TrimPrefix(version, "v"), "Os": goos, "Arch": goarch}
	render := func(text string) string {
		var b strings.Builder
		if err := template.Must(template.New("").Option("missingkey=error").Parse(text)).Execute(&b, data); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	format := a.Formats[0]
	for _, o := range a.FormatOverrides {
		if o.Goos == goos {
			format = o.Formats[0]
		}
	}
	return render(a.NameTemplate) + "." + format, render(cfg.Checksum.NameTemplate)
}

// sh runs a bash snippet with scripts/action.sh's functions defined.
func sh(t *testing.T, env []string, snippet string) (string, error) {
	t.Helper()
	return runErr(repo, env, "bash", "-c", ". scripts/action.sh && "+snippet)
}

// TestActionReleaseNames: the action downloads the archive and checksums
// file that .goreleaser.yaml names, for each runner the release serves,
// from the release's URL; other runners are refused.
func TestActionReleaseNames(t *testing.T) {
	for _, p := range []struct{ runnerOS, runnerArch, goos, goarch string }{
		{"Linux", "X64", "linux", "amd64"}, {"Linux", "ARM64", "linux", "arm64"},
		{"macOS", "X64", "darwin", "amd64"}, {"macOS", "ARM64", "darwin", "arm64"},
		{"Windows", "X64", "windows", "amd64"}, {"Windows", "ARM64", "windows", "arm64"},
	} {
		env := []string{"RUNNER_OS=" + p.runnerOS, "RUNNER_ARCH=" + p.runnerArch, "LEASECTL_RELEASE_URL="}
		out, err := sh(t, env, `read -r os arch <<<"$(release_platform)" && release_url v1.2.0 "$(release_archive v1.2.0 "$os" "$arch")" && release_url v1.2.0 "$(release_checksums v1.2.0)"`)
		archive, sums := goreleaserNames(t, "v1.2.0", p.goos, p.goarch)
		want := "https://github.com/leasectl/leasectl/releases/download/v1.2.0/" + archive + "\n" +
			"https://github.com/leasectl/leasectl/releases/download/v1.2.0/" + sums + "\n"
		if err != nil || out != want {
			t.Errorf("%s/%s: %v\n%s\nwant:\n%s", p.runnerOS, p.runnerArch, err, out, want)
		}
	}
	if out, err := sh(t, []string{"RUNNER_OS=Linux", "RUNNER_ARCH=X86"}, "release_platform"); err == nil || !strings.Contains(out, "unsupported runner architecture X86") {
		t.Errorf("a 32-bit runner: %v %s", err, out)
	}
	if out, err := sh(t, []string{"LEASECTL_RELEASE_URL=file:///srv/releases"}, "release_url v1.2.0 x.tar.gz"); err != nil || out != "file:///srv/releases/v1.2.0/x.tar.gz\n" {
		t.Errorf("LEASECTL_RELEASE_URL: %v %q", err, out)
	}
}

// TestActionVerifiesChecksums: an archive is used only when its SHA-256 is
// the one the release's checksums file lists for its name.
func TestActionVerifiesChecksums(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "leasectl_1.2.0_linux_amd64.tar.gz")
	if err := os.WriteFile(archive, []byte("the archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte("the archive")))
	sums := filepath.Join(dir, "sums.txt")
	for _, tc := range []struct {
		name, sums, want string
		ok               bool
	}{
		{"listed and equal", "0000  leasectl_1.2.0_linux_arm64.tar.gz\n" + sum + "  leasectl_1.2.0_linux_amd64.tar.gz\n", "", true},
		{"binary-mode listing", sum + " *leasectl_1.2.0_linux_amd64.tar.gz\n", "", true},
		{"tampered", strings.Repeat("0", 64) + "  leasectl_1.2.0_linux_amd64.tar.gz\n", "corrupt or was tampered with", false},
		{"not listed", sum + "  leasectl_1.2.0_darwin_amd64.tar.gz\n", "is not listed", false},
		{"a longer name that ends the same", sum + "  old-leasectl_1.2.0_linux_amd64.tar.gz\n", "is not listed", false},
	} {
		if err := os.WriteFile(sums, []byte(tc.sums), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := sh(t, nil, fmt.Sprintf("verify_checksum %q %q", archive, sums))
		if (err == nil) != tc.ok || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %v %q", tc.name, err, out)
		}
	}
}

// TestActionInstallsARelease serves a release the way GitHub does, from a
// directory (file:// URLs: no network here), holding an archive of a real
// leasectl binary and its checksums, and runs the action with version
// v1.2.3: it downloads, verifies, and checks with that binary. A tampered
// archive and a release that does not exist fail the step as annotations.
func TestActionInstallsARelease(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "leasectl")
	// -buildvcs=false: stamped with the version and commit only, as said
	// below, even where go build would add the clone's commit time (a git
	// checkout with git installed and no GOFLAGS saying otherwise: CI's
	// clean clone on a fresh machine).
	run(t, repo, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-buildvcs=false", "-o", bin,
		"-ldflags", "-X "+buildinfoPkg+".version=1.2.3 -X "+buildinfoPkg+".commit=feedface", ".")
	releases := t.TempDir()
	archive, sums := goreleaserNames(t, "v1.2.3", "linux", "amd64")
	writeRelease(t, filepath.Join(releases, "v1.2.3"), archive, sums, bin)

	r := keysRepo(t, "roles:\n  poller: 1840000009\n")
	env := map[string]string{"INPUT_VERSION": "v1.2.3", "RUNNER_OS": "Linux", "RUNNER_ARCH": "X64", "LEASECTL_RELEASE_URL": "file://" + releases}
	res := runAction(t, r.Dir, env)
	res.want(t, 1, "installing leasectl v1.2.3", "leasectl v1.2.3 (feedface)", "::error file=keys.yaml,line=2::KEY_CHANGED: ")

	// Tampered: the archive no longer matches its listed checksum.
	f, err := os.OpenFile(filepath.Join(releases, "v1.2.3", archive), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	res = runAction(t, r.Dir, env)
	res.want(t, 3, "::error title=leasectl action::cannot install leasectl v1.2.3: "+archive+" has SHA-256 ")
	if !strings.Contains(res.Out, "tampered with") || strings.Contains(res.Out, "KEY_CHANGED") {
		t.Errorf("a tampered archive was used:\n%s", res.Out)
	}

	env["INPUT_VERSION"] = "v9.0.0"
	runAction(t, r.Dir, env).want(t, 3, "::error title=leasectl action::cannot install leasectl v9.0.0: cannot download file://"+releases+"/v9.0.0/leasectl_9.0.0_linux_amd64.tar.gz")
}

// writeRelease writes dir/archive (a tar.gz holding bin as leasectl, with
// goreleaser's layout) and dir/sums listing its SHA-256.
func writeRelease(t *testing.T, dir, archive, sums, bin string) {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"LICENSE", 0o644, []byte("Apache License 2.0\n")}, {"leasectl", 0o755, data}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	zw.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, archive), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("%x  %s\n", sha256.Sum256(b.Bytes()), archive)
	if err := os.WriteFile(filepath.Join(dir, sums), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
}
