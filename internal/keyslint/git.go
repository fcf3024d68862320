package keyslint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/leasectl/leasectl/internal/keysfile"
)

// GitSource says where a base version of a keys file came from.
type GitSource struct {
	// Ref is the ref as given, or the tag found when none was given.
	Ref string
	// Commit is the full hash Ref resolved to.
	Commit string
	// Path is the file's path relative to the repository root.
	Path string
}

// String renders the source the way git names a file at a revision.
func (s GitSource) String() string { return s.Ref + ":" + s.Path }

// GitError is a git command that failed for a reason leasectl does not
// interpret (git missing, a corrupt repository, unsafe ownership).
type GitError struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *GitError) Error() string {
	if errors.Is(e.Err, exec.ErrNotFound) {
		return "git is not installed, and reading the base version from git needs it (apt-get install git)"
	}
	msg := fmt.Sprintf("git %s: %v", strings.Join(e.Args, " "), e.Err)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

func (e *GitError) Unwrap() error { return e.Err }

// NotRepoError reports a keys file outside any git repository.
type NotRepoError struct {
	Path string
}

func (e *NotRepoError) Error() string {
	return fmt.Sprintf("%s is not inside a git repository, so git has no earlier version of it to compare with", e.Path)
}

// RefNotFoundError reports a ref that does not name a commit.
type RefNotFoundError struct {
	Ref string
}

func (e *RefNotFoundError) Error() string {
	return fmt.Sprintf("git ref %q not found: check the tag, branch or commit (in a shallow CI clone, fetch history and tags: actions/checkout with fetch-depth: 0, or git fetch --tags)", e.Ref)
}

// NotAtRefError reports a keys file that does not exist at a ref.
type NotAtRefError struct {
	Ref  string
	Path string
	// Tree is set when the path names a directory at Ref.
	Tree bool
}

func (e *NotAtRefError) Error() string {
	if e.Tree {
		return fmt.Sprintf("%s is a directory at %s, not a keys file", e.Path, e.Ref)
	}
	return fmt.Sprintf("%s does not exist at %s: check the path (relative to the repository root) and the ref", e.Path, e.Ref)
}

// NoBaseError reports that no tag is reachable from HEAD, so there is no
// previous release to compare with.
type NoBaseError struct {
	// OnlyHead is set when the only tag reachable points at HEAD itself.
	OnlyHead bool
}

func (e *NoBaseError) Error() string {
	what := "no tag is reachable from HEAD"
	if e.OnlyHead {
		what = "no tag is reachable from HEAD except one on HEAD itself"
	}
	return what + ", so there is no previous release to compare with (in CI, fetch tags: actions/checkout with fetch-depth: 0)"
}

// ShallowError reports a shallow clone (actions/checkout fetches a single
// commit by default) in which the base cannot be known: the previous
// release's tag, or the commit a ref names, may lie outside the history that
// was fetched, and tags fetched into the clone do not connect to HEAD. It is
// never a missing base: --allow-missing-base does not excuse it.
type ShallowError struct {
	// Ref is the ref that was not found; empty when the base was to be the
	// latest tag reachable from HEAD.
	Ref string
}

func (e *ShallowError) Error() string {
	what := "the latest tag reachable from HEAD (the previous release) cannot be known, since the tags and commits before the fetched ones are missing"
	if e.Ref != "" {
		what = fmt.Sprintf("git ref %q is not in the history that was fetched", e.Ref)
	}
	return "this repository is a shallow clone, so " + what + ": fetch the full history and tags (GitHub Actions: actions/checkout with fetch-depth: 0; elsewhere: git fetch --unshallow --tags)"
}

// IsMissingBase reports whether err means there is no base version at all:
// no previous release, or the file is new since the base ref. A first
// release may pass on that (`keys diff --allow-missing-base`); a mistyped ref
// never does.
func IsMissingBase(err error) bool {
	var noBase *NoBaseError
	var notAt *NotAtRefError
	return errors.As(err, &noBase) || (errors.As(err, &notAt) && !notAt.Tree)
}

// RepoPath returns the path of file relative to the root of the git
// repository that holds it, with forward slashes: the path git revisions
// and GitHub annotations use. It runs git in the file's directory.
func RepoPath(ctx context.Context, file string) (string, error) {
	dir := filepath.Dir(file)
	prefix, err := git(ctx, dir, "rev-parse", "--show-prefix")
	if err != nil {
		var ge *GitError
		if errors.As(err, &ge) && strings.Contains(ge.Stderr, "not a git repository") {
			return "", &NotRepoError{Path: file}
		}
		if _, statErr := os.Stat(dir); statErr != nil {
			return "", &keysfile.NotFoundError{Path: file}
		}
		return "", err
	}
	return path.Join(strings.TrimSpace(string(prefix)), filepath.Base(file)), nil
}

// LatestTag returns the latest tag reachable from HEAD in the repository
// that holds file: the previous release. When HEAD itself is tagged (a
// release build), that tag is the release being checked, so the one before
// it is returned.
//
// In a shallow clone the answer cannot be known, whether or not tags were
// fetched into it, and LatestTag returns a [*ShallowError].
func LatestTag(ctx context.Context, file string) (string, error) {
	dir := filepath.Dir(file)
	if shallow, err := isShallow(ctx, dir); err != nil {
		return "", err
	} else if shallow {
		return "", &ShallowError{}
	}
	tag, err := describe(ctx, dir, "HEAD")
	if err != nil {
		return "", err
	}
	tagCommit, err := resolve(ctx, dir, tag)
	if err != nil {
		return "", err
	}
	head, err := resolve(ctx, dir, "HEAD")
	if err != nil {
		return "", err
	}
	if tagCommit != head {
		return tag, nil
	}
	if _, err := resolve(ctx, dir, "HEAD^"); err != nil {
		return "", &NoBaseError{OnlyHead: true} // HEAD is the first commit
	}
	prev, err := describe(ctx, dir, "HEAD^")
	var noBase *NoBaseError
	if errors.As(err, &noBase) {
		return "", &NoBaseError{OnlyHead: true}
	}
	return prev, err
}

// isShallow reports whether the repository that holds dir is a shallow
// clone. Git 2.15 and newer answer --is-shallow-repository; older ones echo
// the unknown option, and then the shallow file in the git directory tells.
func isShallow(ctx context.Context, dir string) (bool, error) {
	out, err := git(ctx, dir, "rev-parse", "--is-shallow-repository")
	if err != nil {
		return false, err
	}
	switch strings.TrimSpace(string(out)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	out, err = git(ctx, dir, "rev-parse", "--git-path", "shallow")
	if err != nil {
		return false, err
	}
	p := strings.TrimSpace(string(out))
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	_, err = os.Stat(p)
	return err == nil, nil
}

func describe(ctx context.Context, dir, rev string) (string, error) {
	out, err := git(ctx, dir, "describe", "--tags", "--abbrev=0", rev)
	var ge *GitError
	if errors.As(err, &ge) && (strings.Contains(ge.Stderr, "No names found") || strings.Contains(ge.Stderr, "No tags can describe")) {
		return "", &NoBaseError{}
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// resolve returns the commit that ref names, or a [*RefNotFoundError].
func resolve(ctx context.Context, dir, ref string) (string, error) {
	if ref == "" || strings.HasPrefix(ref, "-") {
		return "", &RefNotFoundError{Ref: ref}
	}
	out, err := git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", ref+"^{commit}")
	var ge *GitError
	var exit *exec.ExitError
	if errors.As(err, &ge) && errors.As(err, &exit) && exit.ExitCode() == 1 {
		return "", &RefNotFoundError{Ref: ref}
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// LoadFromGit reads the version of the keys file at file's path as of ref
// (the equivalent of `git show REF:path`, path relative to the repository
// root) and decodes it. An empty ref means [LatestTag]. In a shallow clone, a
// ref that resolves is read as usual (a fetched commit has its whole tree);
// one that does not is a [*ShallowError], as is an empty ref. The file is
// checked for its form only, like [LoadBase]: the base is history, and only
// its form must be readable.
func LoadFromGit(ctx context.Context, file, ref string) (*keysfile.File, GitSource, error) {
	repoPath, err := RepoPath(ctx, file)
	if err != nil {
		return nil, GitSource{}, err
	}
	src := GitSource{Ref: ref, Path: repoPath}
	dir := filepath.Dir(file)
	if src.Ref == "" {
		if src.Ref, err = LatestTag(ctx, file); err != nil {
			return nil, src, err
		}
	}
	if src.Commit, err = resolve(ctx, dir, src.Ref); err != nil {
		var refErr *RefNotFoundError
		if errors.As(err, &refErr) && ref != "" {
			// A ref missing from a shallow clone may well exist upstream.
			if shallow, shallowErr := isShallow(ctx, dir); shallowErr == nil && shallow {
				err = &ShallowError{Ref: ref}
			}
		}
		return nil, src, err
	}
	// One batch-check tells missing, directory and size apart before
	// anything is read.
	object := src.Commit + ":" + repoPath
	out, err := gitStdin(ctx, dir, object+"\n", "cat-file", "--batch-check")
	if err != nil {
		return nil, src, err
	}
	fields := strings.Fields(string(out))
	switch {
	case len(fields) == 3 && fields[1] == "blob":
	case len(fields) == 3 && fields[1] == "tree":
		return nil, src, &NotAtRefError{Ref: src.Ref, Path: repoPath, Tree: true}
	default:
		return nil, src, &NotAtRefError{Ref: src.Ref, Path: repoPath}
	}
	var data []byte
	if size, err := strconv.Atoi(fields[2]); err != nil || size > keysfile.MaxFileSize {
		// Too large: the parser refuses the file by its size alone, so
		// the blob need not be read.
		data = make([]byte, keysfile.MaxFileSize+1)
	} else if data, err = git(ctx, dir, "cat-file", "blob", fields[0]); err != nil {
		return nil, src, err
	}
	f, err := keysfile.Parse(src.String(), data, keysfile.Options{FormOnly: true})
	return f, src, err
}

// git runs git in dir and returns its standard output, at most
// MaxFileSize+1 bytes of it.
func git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	return gitStdin(ctx, dir, "", args...)
}

func gitStdin(ctx context.Context, dir, stdin string, args ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, "git", args...)
	c.Dir = dir
	// A fixed locale keeps the messages matched above in English; no
	// prompt may wait for a terminal in CI.
	c.Env = append(os.Environ(), "LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0")
	c.Stdin = strings.NewReader(stdin)
	out := &cappedBuffer{max: keysfile.MaxFileSize + 1}
	var errOut cappedBuffer
	errOut.max = 4096
	c.Stdout, c.Stderr = out, &errOut
	if err := c.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &GitError{Args: args, Stderr: strings.TrimSpace(errOut.String()), Err: err}
	}
	return out.Bytes(), nil
}

// cappedBuffer keeps the first max bytes written to it and drops the rest,
// so a command's output cannot grow without bound.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}
