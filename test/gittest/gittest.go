// Package gittest builds throwaway git repositories for tests of code that
// reads files from git history (keys diff). It runs the real git binary with
// a fixed identity and no global or system configuration, so tests behave
// the same on every machine.
package gittest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Repo is a git repository in a temporary directory.
type Repo struct {
	t   testing.TB
	Dir string
}

// New creates an empty repository with a branch called main.
func New(t testing.TB) *Repo {
	t.Helper()
	r := &Repo{t: t, Dir: t.TempDir()}
	r.Git("init", "-q", "-b", "main")
	return r
}

// Git runs git in the repository and returns its trimmed output; a failure
// fails the test.
func (r *Repo) Git(args ...string) string {
	r.t.Helper()
	c := exec.Command("git", args...)
	c.Dir = r.Dir
	c.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=leasectl test", "GIT_AUTHOR_EMAIL=test@leasectl.invalid",
		"GIT_COMMITTER_NAME=leasectl test", "GIT_COMMITTER_EMAIL=test@leasectl.invalid",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := c.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Path returns the absolute path of name inside the repository.
func (r *Repo) Path(name string) string { return filepath.Join(r.Dir, filepath.FromSlash(name)) }

// Write writes content to name (a slash-separated path relative to the
// repository root), creating directories as needed.
func (r *Repo) Write(name, content string) {
	r.t.Helper()
	p := r.Path(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// Commit stages every change and commits it with message.
func (r *Repo) Commit(message string) {
	r.t.Helper()
	r.Git("add", "-A")
	r.Git("commit", "-q", "--allow-empty", "-m", message)
}

// Tag puts a lightweight tag on HEAD.
func (r *Repo) Tag(name string) {
	r.t.Helper()
	r.Git("tag", name)
}

// Clone clones r into a new temporary directory with git clone's extra args
// (e.g. "--depth", "1") and returns the clone. It clones through a file://
// URL, since git ignores --depth for a plain local path.
func Clone(t testing.TB, r *Repo, args ...string) *Repo {
	t.Helper()
	c := &Repo{t: t, Dir: t.TempDir()}
	c.Git(append(append([]string{"clone", "-q"}, args...), "file://"+r.Dir, c.Dir)...)
	return c
}
