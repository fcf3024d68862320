package release

import (
	"debug/elf"
	"encoding/json"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd   string // upper case: FROM, RUN, …
	args  string
	stage int // index of the FROM it belongs to; -1 before the first
}

// parseDockerfile reads the instructions of a Dockerfile: comments and
// blank lines dropped, lines ending in a backslash joined.
func parseDockerfile(t *testing.T, text string) []instruction {
	t.Helper()
	var out []instruction
	stage := -1
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		full := cur.String()
		cur.Reset()
		cmd, args, _ := strings.Cut(full, " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instruction{cmd: cmd, args: strings.TrimSpace(args), stage: stage})
	}
	if cur.Len() > 0 {
		t.Fatalf("the Dockerfile ends in a continuation line: %q", cur.String())
	}
	return out
}

// TestDockerfile checks the image's important properties (no Docker engine
// runs here to build it): a multi-stage build whose go build is static
// (CGO_ENABLED=0), a small final base, a non-root numeric USER and leasectl
// as the ENTRYPOINT. Then it runs the build stage's go build command itself,
// with the Dockerfile's ARGs, and checks that the binary is statically
// linked and carries the stamped version.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, readFile(t, "Dockerfile"))
	var froms []instruction
	args := map[string]string{}
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in)
		case "ARG":
			name, value, _ := strings.Cut(in.args, "=")
			args[name] = value
		}
	}
	if len(froms) < 2 {
		t.Fatalf("want a multi-stage build (a Go stage and a small final one), got %d FROM", len(froms))
	}
	buildFields := strings.Fields(froms[0].args)
	if len(buildFields) != 3 || !strings.EqualFold(buildFields[1], "AS") {
		t.Fatalf("the first stage must be named (FROM image AS build): %q", froms[0].args)
	}
	buildStage := buildFields[2]
	final := len(froms) - 1
	base := strings.Fields(froms[final].args)[0]
	if !(strings.HasPrefix(base, "gcr.io/distroless/static") || base == "scratch" || strings.HasPrefix(base, "alpine")) {
		t.Errorf("final base %q is not a small one (distroless static, scratch or alpine)", base)
	}

	// The Go version of the build image must build go.mod's.
	goMod := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readFile(t, "go.mod"))
	if goMod == nil || versionLess(args["GO_VERSION"], goMod[1]) {
		t.Errorf("ARG GO_VERSION=%s is older than go.mod's go %v: the image cannot build the module offline", args["GO_VERSION"], goMod)
	}

	var user, entrypoint, copySrc, copyDst, buildCmd string
	for _, in := range ins {
		switch {
		case in.stage == final && in.cmd == "USER":
			user = in.args
		case in.stage == final && in.cmd == "ENTRYPOINT":
			entrypoint = in.args
		case in.stage == final && in.cmd == "COPY" && strings.HasPrefix(in.args, "--from="+buildStage+" "):
			f := strings.Fields(in.args)
			copySrc, copyDst = f[1], f[2]
		case in.stage == 0 && in.cmd == "RUN" && strings.Contains(in.args, "go build"):
			buildCmd = in.args
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q: want a numeric non-root user, so that runAsNonRoot can check it", user)
	}
	var argv []string
	if err := json.Unmarshal([]byte(entrypoint), &argv); err != nil || len(argv) == 0 || path.Base(argv[0]) != "leasectl" {
		t.Errorf("ENTRYPOINT %q: want the exec form with leasectl, so that it runs as PID 1 and gets signals", entrypoint)
	} else if copyDst != argv[0] {
		t.Errorf("the binary is copied to %q, the ENTRYPOINT runs %q", copyDst, argv[0])
	}
	if !strings.Contains(buildCmd, "CGO_ENABLED=0") || !strings.Contains(buildCmd, "-o "+copySrc) {
		t.Fatalf("the build stage's go build must be static (CGO_ENABLED=0) and write %q: %q", copySrc, buildCmd)
	}
	for _, v := range []string{"version", "commit", "date"} {
		if !strings.Contains(buildCmd, "-X "+buildinfoPkg+"."+v+"=") {
			t.Errorf("the build does not stamp %s.%s", buildinfoPkg, v)
		}
	}
	if ignore := readFile(t, ".dockerignore"); !regexp.MustCompile(`(?m)^\.git$`).MatchString(ignore) {
		t.Errorf(".dockerignore does not leave out .git")
	}

	// Run the stage's build command, as the image build would, with the
	// build arguments a release passes.
	out := t.TempDir()
	cmd := strings.ReplaceAll(buildCmd, path.Dir(copySrc)+"/", out+"/")
	env := []string{"VERSION=v9.8.7", "COMMIT=0123456789abcdef0123456789abcdef01234567", "DATE=2026-01-02T03:04:05Z"}
	run(t, repo, env, "sh", "-c", cmd)
	bin := filepath.Join(out, path.Base(copySrc))
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v): it cannot run on %s", p.Type, base)
		}
	}
	var info struct{ Version, Commit, Date string }
	if err := json.Unmarshal([]byte(run(t, out, nil, bin, "version", "-o", "json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != "v9.8.7" || info.Commit != "0123456789abcdef0123456789abcdef01234567" || info.Date != "2026-01-02T03:04:05Z" {
		t.Errorf("the image's binary reports %+v", info)
	}
}

// versionLess compares dotted version numbers ("1.26.8" < "1.27").
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
