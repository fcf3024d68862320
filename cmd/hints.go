package cmd

import (
	"errors"
	"os/exec"
	"strings"

	"github.com/leasectl/leasectl/internal/keysfile"
	"github.com/leasectl/leasectl/internal/keyslint"
	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/keys"
	"github.com/spf13/cobra"
)

// Packages speak of their own parameters (a keys file, a git ref, a lab's
// directory); withFlagHints adds what to do about their errors in the
// command line's terms: the flags and commands that fix them.
func withFlagHints(app *App, c *cobra.Command, err error) error {
	var (
		notFound *keys.NotFoundError
		// keys lint and keys diff parse with internal/keysfile itself.
		fileNotFound *keysfile.NotFoundError
		gitErr       *keyslint.GitError
		notRepo      *keyslint.NotRepoError
		notAt        *keyslint.NotAtRefError
		noBase       *keyslint.NoBaseError
		shallow      *keyslint.ShallowError
		running      *lab.AlreadyRunningError
	)
	switch {
	case errors.As(err, &notFound):
		return hinted(err, ": ", keysNotFoundHint(app, c, notFound.Path))
	case errors.As(err, &fileNotFound):
		return hinted(err, ": ", keysNotFoundHint(app, c, fileNotFound.Path))
	case errors.As(err, &gitErr) && errors.Is(gitErr.Err, exec.ErrNotFound):
		return hinted(err, "; ", "or pass --base-file PATH to compare with a file")
	case errors.As(err, &notRepo):
		return hinted(err, ": ", "run keys diff in a clone, or pass --base-file PATH")
	case errors.As(err, &notAt) && !notAt.Tree:
		return hinted(err, "; ", "if this file is new since "+notAt.Ref+", pass --allow-missing-base")
	case errors.As(err, &noBase):
		return hinted(err, "; ", "pass --base REF, or --allow-missing-base for the first release")
	case errors.As(err, &shallow):
		return hinted(err, "; ", "or pass --base-file PATH")
	case errors.As(err, &running):
		return hinted(err, ": ", "use it, or stop it first with: leasectl lab down --dir "+running.Dir)
	case errors.Is(err, lab.ErrNoLab):
		return hinted(err, "; ", "start one with: leasectl lab up"+dirArg(c))
	}
	return err
}

// keysNotFoundHint says how to name the keys file, and for the commands
// that can do without one, how.
func keysNotFoundHint(app *App, c *cobra.Command, path string) string {
	switch {
	case path != app.KeysPath():
		return "check the path" // a FILE argument
	case app.Global.Keys != "":
		return "check the path given to --keys"
	case app.Getenv("LEASECTL_KEYS") != "":
		return "check the path in $LEASECTL_KEYS"
	}
	hint := "pass --keys FILE or set LEASECTL_KEYS"
	switch c.Name() {
	case "who":
		hint += "; without a keys file, name the keys (leasectl who 1840000001) or show every advisory lock (leasectl who --all)"
	case "failover", "run":
		hint += "; without a keys file, give the key itself: --key N"
	}
	return hint
}

// dirArg is " --dir DIR" when c was given --dir, for commands to copy.
func dirArg(c *cobra.Command) string {
	if c == nil {
		return ""
	}
	if f := c.Flags().Lookup("dir"); f != nil && f.Changed {
		return " --dir " + f.Value.String()
	}
	return ""
}

// hintedError is an error with a hint after its text.
type hintedError struct {
	err       error
	sep, hint string
}

func hinted(err error, sep, hint string) error { return &hintedError{err: err, sep: sep, hint: hint} }

func (e *hintedError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, "\n") {
		// A list (the problems of a file): the hint on a line of its own.
		return msg + "\n" + e.hint
	}
	return msg + e.sep + e.hint
}

func (e *hintedError) Unwrap() error { return e.err }
