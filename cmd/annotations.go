package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasectl/leasectl/internal/keysfile"
	"github.com/leasectl/leasectl/internal/keyslint"
	"github.com/spf13/cobra"
)

// GitHub Actions annotations: keys lint and keys diff with -o
// github-actions write each finding, and each error of theirs (Run), as a
// workflow command that the pull request shows at file:line.

// annotationPath is the path GitHub annotations need: relative to the
// repository root. Outside a repository it is the path as given.
func annotationPath(ctx context.Context, path string) string {
	if p, err := keyslint.RepoPath(ctx, path); err == nil {
		return p
	}
	return filepath.ToSlash(path)
}

// writeAnnotation writes one GitHub Actions workflow command, which shows
// the finding on the pull request's diff at file:line.
func writeAnnotation(w io.Writer, sev keyslint.Severity, file string, line int, rule, message string) {
	cmd := "error"
	if sev != keyslint.SeverityError {
		cmd = "notice"
	}
	writeWorkflowCommand(w, cmd, file, line, "", rule+": "+message)
}

// writeWorkflowCommand writes an annotation command (error, warning or
// notice) with the properties that are set: file (relative to the
// repository root), line (when positive) and title.
func writeWorkflowCommand(w io.Writer, cmd, file string, line int, title, message string) {
	var props []string
	if file != "" {
		props = append(props, "file="+ghProperty(file))
		if line > 0 {
			props = append(props, fmt.Sprintf("line=%d", line))
		}
	}
	if title != "" {
		props = append(props, "title="+ghProperty(title))
	}
	if len(props) > 0 {
		cmd += " " + strings.Join(props, ",")
	}
	fmt.Fprintf(w, "::%s::%s\n", cmd, ghData(message))
}

// wantsAnnotations reports whether c, the command that failed, is keys lint
// or keys diff asked for -o github-actions (or its deprecated name
// --format). The command line args are read when the flags were not: a flag
// error stops parsing before -o may have been read.
func wantsAnnotations(c *cobra.Command, app *App, args []string) bool {
	if c == nil || !c.HasParent() || c.Parent().Name() != "keys" || (c.Name() != "lint" && c.Name() != "diff") {
		return false
	}
	if f := c.Flags().Lookup("output"); f != nil && f.Changed && app.Global.Output == formatGH {
		return true
	}
	for i, a := range args {
		if a == "--" {
			return false
		}
		for _, flag := range []string{"-o", "--output", "--format"} {
			if a == flag+"="+formatGH || a == flag && i+1 < len(args) && args[i+1] == formatGH {
				return true
			}
		}
		if a == "-o"+formatGH {
			return true
		}
	}
	return false
}

// writeErrorAnnotations renders err, the error that ended keys lint or keys
// diff in the github-actions format, as error annotations on w, so that the
// pull request shows it: a plain "Error:" line shows only in the job's log.
// The problems of an invalid keys file are annotated at their lines; any
// other error (a missing file, a shallow clone, a ref not found, a usage
// error) is one annotation on the keys file, titled with the command.
func writeErrorAnnotations(ctx context.Context, w io.Writer, app *App, c *cobra.Command, err error) {
	var check *CheckFailedError
	if errors.As(err, &check) && check.Message == "" {
		return // the findings are annotated already
	}
	path := app.KeysPath()
	if args := c.Flags().Args(); len(args) > 0 {
		path = args[0]
	}
	file := annotationPath(ctx, path)
	title := c.CommandPath()
	var invalid *keysfile.InvalidError
	var usage *UsageError
	switch {
	case errors.As(err, &invalid):
		if _, statErr := os.Stat(invalid.Path); statErr == nil {
			// The keys file itself, or a --base-file: at its lines.
			at := annotationPath(ctx, invalid.Path)
			for _, p := range invalid.Problems {
				writeAnnotation(w, keyslint.SeverityError, at, p.Line, p.Rule, p.Message)
			}
			return
		}
		// The base from git (REF:path): its lines are not the pull
		// request's, so each problem goes on the keys file as a whole.
		for _, p := range invalid.Problems {
			writeWorkflowCommand(w, "error", file, 0, title, fmt.Sprintf("the base %s is not a valid keys file: %s: %s", p.Location(invalid.Path), p.Rule, p.Message))
		}
	case errors.As(err, &usage):
		writeWorkflowCommand(w, "error", "", 0, title, err.Error())
	default:
		writeWorkflowCommand(w, "error", file, 0, title, err.Error())
	}
}

// ghData escapes the message of a workflow command.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(termSafeLines(s))
}

// ghProperty escapes a property value of a workflow command.
func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(termSafeLines(s))
}
