package release

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo is the repository's root directory.
var repo string

// tmp is shared by the tests of this package: a leasectl binary built
// once, and goreleaser's work.
var tmp string

func TestMain(m *testing.M) {
	var err error
	if repo, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		panic(err)
	}
	if tmp, err = os.MkdirTemp("", "leasectl-release-test-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// run runs name with args in dir and returns its combined output; a
// failure fails the test.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

// readFile returns the content of a file of the repository.
func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// buildinfoPkg is the package whose variables release builds stamp.
const buildinfoPkg = "github.com/leasectl/leasectl/internal/buildinfo"
