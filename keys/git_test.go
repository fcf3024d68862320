package keys

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/gittest"
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
	if !strings.Contains(err.Error(), "--allow-missing-base") {
		t.Errorf("the error does not say what to do: %v", err)
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
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Path != "v2:keys.yaml" {
		t.Errorf("a base that does not parse: %T %v", err, err)
	}
}
