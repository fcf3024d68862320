package keyslint

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/internal/keysfile"
	"github.com/leasectl/leasectl/test/gittest"
)

const (
	v1Keys = "roles:\n  poller: 1840000001\n  scheduler: 1840000002\n"
	v2Keys = "roles:\n  poller: 1840000001\n  scheduler: 1840000002\n  reconciler: 1840000003\n"
)

// release builds a repository with deploy/keys.yaml released as v1.0.0
// and changed in a later commit.
func release(t *testing.T) *gittest.Repo {
	r := gittest.New(t)
	r.Write("deploy/keys.yaml", v1Keys)
	r.Commit("keys v1")
	r.Tag("v1.0.0")
	r.Write("deploy/keys.yaml", v2Keys)
	r.Commit("add reconciler")
	return r
}

func TestLoadFromGit(t *testing.T) {
	ctx := context.Background()
	r := release(t)
	file := r.Path("deploy/keys.yaml")

	f, src, err := LoadFromGit(ctx, file, "")
	if err != nil {
		t.Fatal(err)
	}
	if src.Ref != "v1.0.0" || src.Path != "deploy/keys.yaml" || src.Commit != r.Git("rev-parse", "v1.0.0^{commit}") {
		t.Errorf("source: %+v", src)
	}
	if len(f.Roles) != 2 || f.Path != "v1.0.0:deploy/keys.yaml" {
		t.Errorf("base: %+v", f)
	}

	if f, _, err = LoadFromGit(ctx, file, "HEAD"); err != nil || len(f.Roles) != 3 {
		t.Errorf("--base HEAD: %v, %+v", err, f)
	}
	if f, _, err = LoadFromGit(ctx, file, "main~1"); err != nil || len(f.Roles) != 2 {
		t.Errorf("--base main~1: %v, %+v", err, f)
	}

	// Relative to the working directory of the process, not of the repo.
	t.Chdir(filepath.Join(r.Dir, "deploy"))
	if _, src, err = LoadFromGit(ctx, "keys.yaml", "v1.0.0"); err != nil || src.Path != "deploy/keys.yaml" {
		t.Errorf("relative path: %v, %+v", err, src)
	}
}

func TestLatestTagSkipsATagOnHead(t *testing.T) {
	ctx := context.Background()
	r := release(t)
	r.Tag("v1.1.0") // a release build: HEAD is the release being checked
	if tag, err := LatestTag(ctx, r.Path("deploy/keys.yaml")); err != nil || tag != "v1.0.0" {
		t.Errorf("got %q, %v; want v1.0.0, the release before HEAD", tag, err)
	}
	r.Write("deploy/keys.yaml", v1Keys)
	r.Commit("after the release")
	if tag, err := LatestTag(ctx, r.Path("deploy/keys.yaml")); err != nil || tag != "v1.1.0" {
		t.Errorf("got %q, %v; want v1.1.0", tag, err)
	}
}

func TestGitErrors(t *testing.T) {
	ctx := context.Background()
	r := release(t)
	file := r.Path("deploy/keys.yaml")

	_, _, err := LoadFromGit(ctx, file, "v9.9.9")
	var refErr *RefNotFoundError
	if !errors.As(err, &refErr) || refErr.Ref != "v9.9.9" || IsMissingBase(err) {
		t.Errorf("unknown ref: %T %v", err, err)
	}
	if _, _, err := LoadFromGit(ctx, file, "--output=/tmp/x"); !errors.As(err, &refErr) {
		t.Errorf("a ref that looks like an option: %T %v", err, err)
	}

	r.Write("other/keys.yaml", v1Keys)
	_, _, err = LoadFromGit(ctx, r.Path("other/keys.yaml"), "v1.0.0")
	var notAt *NotAtRefError
	if !errors.As(err, &notAt) || notAt.Path != "other/keys.yaml" || !IsMissingBase(err) {
		t.Errorf("file absent at the ref: %T %v", err, err)
	}
	if !strings.Contains(err.Error(), "check the path") || strings.Contains(err.Error(), "--") {
		t.Errorf("the error does not say what to check, or names a command-line flag (the command adds those): %v", err)
	}
	if !errors.Is(err, errkind.Input) {
		t.Errorf("a file absent at the ref is not of kind Input: %v", err)
	}

	noTags := gittest.New(t)
	noTags.Write("keys.yaml", v1Keys)
	noTags.Commit("first")
	_, _, err = LoadFromGit(ctx, noTags.Path("keys.yaml"), "")
	var noBase *NoBaseError
	if !errors.As(err, &noBase) || !IsMissingBase(err) || !strings.Contains(err.Error(), "fetch-depth: 0") {
		t.Errorf("no tags: %T %v", err, err)
	}

	onlyHead := gittest.New(t)
	onlyHead.Write("keys.yaml", v1Keys)
	onlyHead.Commit("first")
	onlyHead.Tag("v1.0.0")
	if _, _, err = LoadFromGit(ctx, onlyHead.Path("keys.yaml"), ""); !errors.As(err, &noBase) || !noBase.OnlyHead {
		t.Errorf("the only tag is on HEAD, the first commit: %T %v", err, err)
	}

	empty := gittest.New(t)
	empty.Write("keys.yaml", v1Keys)
	if _, _, err = LoadFromGit(ctx, empty.Path("keys.yaml"), ""); !errors.As(err, &noBase) {
		t.Errorf("a repository without commits: %T %v", err, err)
	}

	outside := filepath.Join(t.TempDir(), "keys.yaml")
	var notRepo *NotRepoError
	if _, _, err = LoadFromGit(ctx, outside, "v1.0.0"); !errors.As(err, &notRepo) {
		t.Errorf("outside a repository: %T %v", err, err)
	}
}

func TestGitDirectoryAtRef(t *testing.T) {
	r := gittest.New(t)
	r.Write("keys.yaml/readme", "a directory named like the file")
	r.Commit("odd")
	r.Tag("v1")
	_, _, err := LoadFromGit(context.Background(), r.Path("keys.yaml"), "v1")
	var notAt *NotAtRefError
	if !errors.As(err, &notAt) || !notAt.Tree || IsMissingBase(err) {
		t.Errorf("a directory at the ref: %T %v", err, err)
	}
}

func TestGitBaseIsDecodedNotLinted(t *testing.T) {
	r := gittest.New(t)
	r.Write("keys.yaml", "roles:\n  a: 1\n  b: 1\n") // shared key: history, not this change's fault
	r.Commit("bad old file")
	r.Tag("v1")
	r.Write("keys.yaml", "roles: [\n")
	r.Commit("broken")
	r.Tag("v2")
	r.Commit("later")
	if _, _, err := LoadFromGit(context.Background(), r.Path("keys.yaml"), "v1"); err != nil {
		t.Errorf("a base with a shared key must load: %v", err)
	}
	_, _, err := LoadFromGit(context.Background(), r.Path("keys.yaml"), "v2")
	var inv *keysfile.InvalidError
	if !errors.As(err, &inv) || inv.Path != "v2:keys.yaml" {
		t.Errorf("a base that does not parse: %T %v", err, err)
	}
}

// TestGitBaseTooLarge: a base larger than keysfile.MaxFileSize at the ref is
// refused by the FILE rule, like a file on disk.
func TestGitBaseTooLarge(t *testing.T) {
	r := gittest.New(t)
	r.Write("keys.yaml", "roles:\n"+strings.Repeat("# padding\n", keysfile.MaxFileSize/10+1))
	r.Commit("huge")
	r.Tag("v1")
	r.Write("keys.yaml", v1Keys)
	r.Commit("small again")
	_, _, err := LoadFromGit(context.Background(), r.Path("keys.yaml"), "v1")
	var inv *keysfile.InvalidError
	if !errors.As(err, &inv) || len(inv.Problems) != 1 || inv.Problems[0].Rule != keysfile.RuleFile ||
		!strings.Contains(inv.Problems[0].Message, "larger than") || inv.Path != "v1:keys.yaml" {
		t.Errorf("a base over MaxFileSize: %T %v", err, err)
	}
	if _, _, err := LoadFromGit(context.Background(), r.Path("keys.yaml"), "HEAD"); err != nil {
		t.Errorf("the small version: %v", err)
	}
}

// TestShallowCloneNeverPassesByAccident: in a shallow clone (actions/checkout's
// default depth of 1) the previous release cannot be known, so keys diff
// without --base refuses with the fix, and --allow-missing-base cannot turn
// that into a pass. Tags fetched into the clone do not change that; the full
// history does.
func TestShallowCloneNeverPassesByAccident(t *testing.T) {
	ctx := context.Background()
	origin := release(t) // v1.0.0, then a change
	wantShallow := func(t *testing.T, err error, ref string) {
		t.Helper()
		var sh *ShallowError
		if !errors.As(err, &sh) || sh.Ref != ref || IsMissingBase(err) {
			t.Fatalf("want a shallow-clone refusal for ref %q, got %T %v", ref, err, err)
		}
		for _, fix := range []string{"fetch-depth: 0", "git fetch --unshallow --tags"} {
			if !strings.Contains(err.Error(), fix) {
				t.Errorf("the error does not name the fix %q: %v", fix, err)
			}
		}
	}

	t.Run("depth 1", func(t *testing.T) {
		c := gittest.Clone(t, origin, "--depth", "1")
		if c.Git("rev-parse", "--is-shallow-repository") != "true" {
			t.Fatal("the clone is not shallow")
		}
		file := c.Path("deploy/keys.yaml")
		_, _, err := LoadFromGit(ctx, file, "")
		wantShallow(t, err, "")
		_, err = LatestTag(ctx, file)
		wantShallow(t, err, "")
		// A ref outside the fetched history, tag or relative.
		_, _, err = LoadFromGit(ctx, file, "v1.0.0")
		wantShallow(t, err, "v1.0.0")
		_, _, err = LoadFromGit(ctx, file, "HEAD~1")
		wantShallow(t, err, "HEAD~1")
		// A ref inside it reads as usual.
		if f, _, err := LoadFromGit(ctx, file, "HEAD"); err != nil || len(f.Roles) != 3 {
			t.Errorf("--base HEAD in a shallow clone: %v", err)
		}
	})

	t.Run("a tag fetched into the shallow clone", func(t *testing.T) {
		c := gittest.Clone(t, origin, "--depth", "1")
		c.Git("fetch", "-q", "--depth", "1", "origin", "tag", "v1.0.0")
		if c.Git("tag") != "v1.0.0" || c.Git("rev-parse", "--is-shallow-repository") != "true" {
			t.Fatal("want a shallow clone holding tag v1.0.0")
		}
		file := c.Path("deploy/keys.yaml")
		_, _, err := LoadFromGit(ctx, file, "")
		wantShallow(t, err, "")
		// Named explicitly, the fetched tag is a knowable base.
		f, src, err := LoadFromGit(ctx, file, "v1.0.0")
		if err != nil || len(f.Roles) != 2 || src.Commit != origin.Git("rev-parse", "v1.0.0") {
			t.Errorf("--base v1.0.0 fetched into a shallow clone: %v, %+v", err, src)
		}
	})

	t.Run("a release build: a shallow clone of a tagged HEAD", func(t *testing.T) {
		origin := release(t)
		origin.Tag("v1.1.0")
		c := gittest.Clone(t, origin, "--depth", "1", "--branch", "v1.1.0")
		_, _, err := LoadFromGit(ctx, c.Path("deploy/keys.yaml"), "")
		wantShallow(t, err, "")
	})

	t.Run("a shallow clone deep enough to hold the tag", func(t *testing.T) {
		origin := gittest.New(t)
		origin.Write("deploy/keys.yaml", v1Keys)
		origin.Commit("before the release")
		origin.Commit("keys v1")
		origin.Tag("v1.0.0")
		origin.Write("deploy/keys.yaml", v2Keys)
		origin.Commit("add reconciler")
		c := gittest.Clone(t, origin, "--depth", "2")
		if c.Git("rev-parse", "--is-shallow-repository") != "true" || c.Git("tag") != "v1.0.0" {
			t.Fatal("want a shallow clone that holds tag v1.0.0")
		}
		// Even with a tag at hand, a later one may not have been fetched
		// (actions/checkout fetches no tags at any depth but 0).
		_, _, err := LoadFromGit(ctx, c.Path("deploy/keys.yaml"), "")
		wantShallow(t, err, "")
	})

	t.Run("unshallowed", func(t *testing.T) {
		c := gittest.Clone(t, origin, "--depth", "1")
		c.Git("fetch", "-q", "--unshallow", "--tags")
		f, src, err := LoadFromGit(ctx, c.Path("deploy/keys.yaml"), "")
		if err != nil || src.Ref != "v1.0.0" || len(f.Roles) != 2 {
			t.Errorf("after git fetch --unshallow --tags: %v, %+v", err, src)
		}
	})

	t.Run("shallow without any tag upstream", func(t *testing.T) {
		first := gittest.New(t)
		first.Write("keys.yaml", v1Keys)
		first.Commit("first")
		first.Write("keys.yaml", v2Keys)
		first.Commit("second")
		c := gittest.Clone(t, first, "--depth", "1")
		// Upstream has no tag, but a shallow clone cannot tell: refuse.
		_, _, err := LoadFromGit(ctx, c.Path("keys.yaml"), "")
		wantShallow(t, err, "")
		// The full history can, and then it is a missing base.
		_, _, err = LoadFromGit(ctx, first.Path("keys.yaml"), "")
		var noBase *NoBaseError
		if !errors.As(err, &noBase) || !IsMissingBase(err) {
			t.Errorf("a full history without tags: %T %v", err, err)
		}
	})
}
