package release

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// goreleaserVersion is the goreleaser this repository's configuration is
// written for (version: 2).
const goreleaserVersion = "v2.15.1"

// goreleaserStatusEnv names the file scripts/test.sh writes when the
// goreleaser it builds in the background, beside the tests, is installed
// (or failed to be): its exit code first. The log is beside it, NAME.log
// for NAME.status.
const goreleaserStatusEnv = "LEASECTL_GORELEASER_STATUS"

// goreleaser returns the goreleaser binary, on PATH or where go install
// puts it; missing, the test fails with the command that installs it.
// Under scripts/test.sh, it first waits for the background install to end,
// and fails with its output when that failed.
func goreleaser(t *testing.T) string {
	t.Helper()
	if status := os.Getenv(goreleaserStatusEnv); status != "" {
		waitGoreleaser(t, status)
	}
	if p, err := exec.LookPath("goreleaser"); err == nil {
		return p
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "goreleaser")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("goreleaser not found: go install github.com/goreleaser/goreleaser/v2@%s (or make goreleaser)", goreleaserVersion)
	return ""
}

// waitGoreleaser waits for status to appear (scripts/test.sh's background
// install of goreleaser has ended), leaving the snapshot release time to run
// before the test binary's deadline, and fails when the install failed.
func waitGoreleaser(t *testing.T, status string) {
	t.Helper()
	limit := time.Now().Add(15 * time.Minute)
	if d, ok := t.Deadline(); ok {
		limit = d.Add(-4 * time.Minute)
	}
	start := time.Now()
	var data []byte
	for {
		var err error
		if data, err = os.ReadFile(status); err == nil {
			break
		}
		if !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if time.Now().After(limit) {
			t.Fatalf("goreleaser's install (scripts/test.sh, in the background) had not ended after %s: %s never appeared", time.Since(start).Round(time.Second), status)
		}
		time.Sleep(time.Second)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for goreleaser's install", waited.Round(time.Second))
	}
	if code, _, _ := strings.Cut(strings.TrimSpace(string(data)), " "); code != "0" {
		log, _ := os.ReadFile(strings.TrimSuffix(status, ".status") + ".log")
		t.Fatalf("installing goreleaser %s failed (exit %s):\n%s", goreleaserVersion, code, log)
	}
}

// releaseConfig is the part of .goreleaser.yaml the tests look at.
type releaseConfig struct {
	Builds []struct {
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
}

// TestGoreleaserConfig: goreleaser check accepts .goreleaser.yaml, which
// builds all six targets statically and stamps the version, commit and date
// into the variables internal/buildinfo reads.
func TestGoreleaserConfig(t *testing.T) {
	t.Parallel() // after the package's other tests: goreleaser may still be building
	out := run(t, repo, nil, goreleaser(t), "check")
	if !strings.Contains(out, "1 configuration file(s) validated") {
		t.Errorf("goreleaser check:\n%s", out)
	}
	var cfg releaseConfig
	if err := yaml.Unmarshal([]byte(readFile(t, ".goreleaser.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Builds) != 1 {
		t.Fatalf("want one build, got %d", len(cfg.Builds))
	}
	b := cfg.Builds[0]
	if !slices.Equal(b.Goos, []string{"linux", "darwin", "windows"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) {
		t.Errorf("targets %v × %v, want linux, darwin, windows × amd64, arm64", b.Goos, b.Goarch)
	}
	if !slices.Contains(b.Env, "CGO_ENABLED=0") {
		t.Errorf("env %v: releases must be static (CGO_ENABLED=0)", b.Env)
	}
	ld := strings.Join(b.Ldflags, " ")
	for _, v := range []string{"version={{ .Version }}", "commit={{ .FullCommit }}", "date={{ .Date }}"} {
		if !strings.Contains(ld, "-X "+buildinfoPkg+"."+v) {
			t.Errorf("ldflags %q do not stamp %s.%s", ld, buildinfoPkg, v)
		}
	}
}

// TestGoreleaserSnapshotRelease runs the whole release pipeline offline, in
// snapshot mode, for all six targets: in a copy of this tree committed to a
// throwaway repository tagged v1.2.3, goreleaser builds, archives and
// checksums linux, darwin and windows on amd64 and arm64. The archives hold
// the binary and the documents, the checksums match, each binary is an
// executable of its platform (the Linux ones static), the one for this
// machine reports the version, commit and date, and the action installs the
// release from these very files.
func TestGoreleaserSnapshotRelease(t *testing.T) {
	t.Parallel() // after the package's other tests: goreleaser may still be building
	gr := goreleaser(t)
	src := t.TempDir()
	copyTree(t, src)
	git := func(args ...string) string {
		return strings.TrimSpace(run(t, src, []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@leasectl.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@leasectl.invalid"}, "git", args...))
	}
	git("init", "-q", "-b", "main")
	git("add", "-A")
	git("commit", "-q", "-m", "release")
	git("tag", "v1.2.3")
	// goreleaser reads the remote's URL (it is never contacted).
	git("remote", "add", "origin", "https://github.com/leasectl/leasectl.git")
	commit := git("rev-parse", "HEAD")

	// The configuration as it is, with dist/ outside.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(readFile(t, ".goreleaser.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(t.TempDir(), "dist")
	cfg["dist"] = dist
	distCfg, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "goreleaser.yaml")
	if err := os.WriteFile(cfgPath, distCfg, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := run(t, src, []string{"GOFLAGS=-buildvcs=false"}, gr, "release", "--snapshot", "--clean", "--config", cfgPath)
	t.Logf("goreleaser release --snapshot (6 targets) took %s", time.Since(start).Round(time.Second))

	const version = "1.2.4-snapshot" // .goreleaser.yaml's snapshot.version_template after v1.2.3
	sumsName := "leasectl_" + version + "_checksums.txt"
	sums, err := os.ReadFile(filepath.Join(dist, sumsName))
	if err != nil {
		t.Fatalf("%v; goreleaser said:\n%s", err, out)
	}
	ranHere := false
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, arch := range []string{"amd64", "arm64"} {
			archive, wantSums := goreleaserNames(t, "v"+version, goos, arch)
			if wantSums != sumsName {
				t.Errorf("checksums file %s, the action expects %s", sumsName, wantSums)
			}
			data, err := os.ReadFile(filepath.Join(dist, archive))
			if err != nil {
				t.Fatalf("%v (the action downloads this name); dist holds: %v", err, ls(dist))
			}
			if line := fmt.Sprintf("%x  %s\n", sha256.Sum256(data), archive); !strings.Contains(string(sums), line) {
				t.Errorf("%s does not list %q:\n%s", sumsName, line, sums)
			}
			exe := "leasectl"
			if goos == "windows" {
				exe = "leasectl.exe"
			}
			bin := extract(t, filepath.Join(dist, archive), exe, []string{exe, "LICENSE", "README.md", "CHANGELOG.md", "completions/leasectl.bash", "docs/README.md", "docs/man/leasectl.1", "docs/guide/run.md"})
			checkExecutable(t, archive, bin, goos, arch)
			if goos != runtime.GOOS || arch != runtime.GOARCH {
				continue
			}
			ranHere = true
			var info struct{ Version, Commit, Date string }
			if err := json.Unmarshal([]byte(run(t, src, nil, bin, "version", "-o", "json")), &info); err != nil {
				t.Fatal(err)
			}
			if _, err := time.Parse(time.RFC3339, info.Date); err != nil || info.Version != "v"+version || info.Commit != commit {
				t.Errorf("the release binary reports %+v; want version v%s, commit %s and an RFC 3339 date", info, version, commit)
			}
		}
	}
	if !ranHere {
		t.Errorf("no release binary for this machine (%s/%s) to run", runtime.GOOS, runtime.GOARCH)
	}

	// The action installs this release, served as GitHub serves it.
	releases := t.TempDir()
	if err := os.Symlink(dist, filepath.Join(releases, "v"+version)); err != nil {
		t.Fatal(err)
	}
	r := keysRepo(t, "roles:\n  poller: 1840000009\n")
	res := runAction(t, r.Dir, map[string]string{"INPUT_VERSION": "v" + version, "RUNNER_OS": "Linux", "RUNNER_ARCH": "X64", "LEASECTL_RELEASE_URL": "file://" + releases})
	res.want(t, 1, "leasectl v"+version+" ("+commit[:12]+", ", "::error file=keys.yaml,line=2::KEY_CHANGED: ")
}

// copyTree copies the repository's files as git sees them (tracked, and
// untracked but not ignored: the tree as it is being worked on) into dst.
func copyTree(t *testing.T, dst string) {
	t.Helper()
	files := strings.Split(strings.TrimSpace(run(t, repo, nil, "git", "ls-files", "-co", "--exclude-standard")), "\n")
	for _, name := range files {
		from := filepath.Join(repo, name)
		st, err := os.Lstat(from)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// extract unpacks a release archive (tar.gz, or zip for Windows) into a
// temporary directory, checks that it holds want, and returns the path of
// its binary, called exe.
func extract(t *testing.T, archive, exe string, want []string) string {
	t.Helper()
	dir := t.TempDir()
	var names []string
	save := func(r io.Reader) {
		out, err := os.OpenFile(filepath.Join(dir, exe), os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, r); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	if strings.HasSuffix(archive, ".zip") {
		zr, err := zip.OpenReader(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		for _, f := range zr.File {
			names = append(names, f.Name)
			if f.Name != exe {
				continue
			}
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			save(r)
			r.Close()
		}
	} else {
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		gz, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if h.Name == exe {
				save(tr)
			}
		}
	}
	for _, w := range want {
		if !slices.Contains(names, w) {
			t.Errorf("%s lacks %s: %v", filepath.Base(archive), w, names)
		}
	}
	return filepath.Join(dir, exe)
}

// checkExecutable checks that bin is an executable for goos/goarch: ELF
// and static for Linux (no interpreter), Mach-O for macOS, PE for Windows.
func checkExecutable(t *testing.T, archive, bin, goos, goarch string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		defer f.Close()
		if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]; f.Machine != want {
			t.Errorf("%s: %v binary", archive, f.Machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: the binary is dynamically linked", archive)
			}
		}
	case "darwin":
		f, err := macho.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		defer f.Close()
		if want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]; f.Cpu != want || f.Type != macho.TypeExec {
			t.Errorf("%s: a Mach-O %v of type %v, want an executable for %v", archive, f.Cpu, f.Type, want)
		}
	case "windows":
		f, err := pe.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		defer f.Close()
		if want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[goarch]; f.Machine != want || f.Characteristics&pe.IMAGE_FILE_EXECUTABLE_IMAGE == 0 {
			t.Errorf("%s: a PE image for machine %#x (characteristics %#x), want an executable for %#x", archive, f.Machine, f.Characteristics, want)
		}
	}
}

func ls(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
