package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/leasectl/leasectl/internal/keysfile"
	"github.com/leasectl/leasectl/internal/keyslint"
	"github.com/spf13/cobra"
)

func newKeysCmd(app *App) *cobra.Command {
	c := &cobra.Command{
		Use:   "keys",
		Short: "Check the role→key map (keys.yaml) and changes to it",
		Long: `keys.yaml maps each role to the advisory-lock key its replicas contend for.
It is a deployment API: during a rolling deploy old and new binaries run side by
side, and if they compute different keys for one role, both lead.

"keys lint" checks one file; "keys diff" compares it with the version of the
previous release and fails on changes that break a rolling deploy, the way
"buf breaking" does for protobuf schemas. Run both in CI.`,
		Example: `  leasectl keys lint
  leasectl keys diff                      # against the latest tag reachable from HEAD
  leasectl keys diff --base main -o github-actions`,
		Args: noArgs,
		RunE: parentRunE,
	}
	c.AddCommand(newKeysLintCmd(app, nil), newKeysDiffCmd(app, nil))
	setOutputs(c, formatText, formatJSON, formatGH)
	return c
}

// addFormatFlag adds --format, the deprecated name of -o for keys lint and
// keys diff.
func addFormatFlag(c *cobra.Command) {
	c.Flags().String("format", formatText, "output format: text, json or github-actions")
	deprecatedAlias(c.Flags(), "format", "output")
}

// keysArgs settles what keys lint and keys diff share: the output format
// (-o) and the optional FILE argument.
func keysArgs(app *App, args []string, format, file *string) error {
	*format = app.Global.Output
	if len(args) == 1 {
		*file = args[0]
	}
	return nil
}

// completeKeysFile completes the FILE argument with YAML files.
func completeKeysFile(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return []cobra.Completion{"yaml", "yml"}, cobra.ShellCompDirectiveFilterFileExt
}

func rulesHelp(rules []keyslint.RuleDoc) string {
	var b strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&b, "  %-19s %-5s  %s\n", r.Name, r.Severity, strings.ReplaceAll(r.Doc, "`", ""))
	}
	return b.String()
}

type keysLintOptions struct {
	app    *App
	File   string
	Format string
}

// newKeysLintCmd builds `leasectl keys lint`; runF, when not nil, runs
// instead of runKeysLint with the parsed options (tests).
func newKeysLintCmd(app *App, runF func(*keysLintOptions) error) *cobra.Command {
	opts := &keysLintOptions{app: app}
	c := &cobra.Command{
		Use:   "lint [FILE]",
		Short: "Check keys.yaml: syntax, names, keys, shared and reserved keys",
		Long: `Check one keys file (default: the --keys file; - reads standard input) and
list every problem with file:line. Exit 0 when the file is valid, 2 when it
is not.

Keys are int64 values written in plain decimal or as 0x hex: the spellings
every YAML reader agrees on. Anchors and aliases are refused.

Rules:
` + rulesHelp(keyslint.LintRules()),
		Example: `  leasectl keys lint
  leasectl keys lint deploy/keys.yaml -o github-actions
  kubectl get configmap leases -o jsonpath='{.data.keys\.yaml}' | leasectl keys lint -`,
		Args:              maxArgs(1),
		ValidArgsFunction: completeKeysFile,
		RunE: func(c *cobra.Command, args []string) error {
			if err := keysArgs(app, args, &opts.Format, &opts.File); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runKeysLint(c.Context(), opts)
		},
	}
	addFormatFlag(c)
	return c
}

// lintJSON is the documented schema of `leasectl keys lint -o json`
// (docs/json.md).
type lintJSON struct {
	docHeader
	File     string        `json:"file"`
	Roles    []entryJSON   `json:"roles"`
	Retired  []entryJSON   `json:"retired"`
	Problems []problemJSON `json:"problems"`
}

type entryJSON struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	Line int    `json:"line"`
}

type problemJSON struct {
	Rule    string  `json:"rule"`
	File    string  `json:"file"`
	Line    int     `json:"line"`
	Role    *string `json:"role"`
	Message string  `json:"message"`
}

func entriesJSON(entries []keysfile.Entry) []entryJSON {
	out := make([]entryJSON, len(entries))
	for i, e := range entries {
		out[i] = entryJSON{Name: e.Name, Key: strconv.FormatInt(e.Key, 10), Line: e.Line}
	}
	return out
}

func runKeysLint(ctx context.Context, opts *keysLintOptions) error {
	app := opts.app
	path := opts.File
	if path == "" {
		path = app.KeysPath()
	}
	var f *keysfile.File
	var err error
	if path == "-" {
		path = "<stdin>"
		f, err = readKeysFrom(app.IO.In, path)
	} else {
		f, err = keysfile.Load(path, keysfile.Options{})
	}
	var invalid *keysfile.InvalidError
	if err != nil && !errors.As(err, &invalid) {
		return err
	}
	var problems []keysfile.Problem
	if invalid != nil {
		problems = invalid.Problems
	}
	w := app.IO.Out
	switch opts.Format {
	case formatJSON:
		out := lintJSON{docHeader: header(f != nil), File: path, Roles: []entryJSON{}, Retired: []entryJSON{}, Problems: []problemJSON{}}
		if f != nil {
			out.Roles, out.Retired = entriesJSON(f.Roles), entriesJSON(f.Retired)
		}
		for _, p := range problems {
			out.Problems = append(out.Problems, problemJSON{Rule: p.Rule, File: path, Line: p.Line, Role: strOrNil(p.Role), Message: p.Message})
		}
		if err := app.writeJSON(w, out); err != nil {
			return err
		}
	case formatGH:
		// The problems are annotated by writeErrorAnnotations, from the
		// error returned below, like every other error in this format.
		if f != nil {
			fmt.Fprintf(w, "%s: no problems (%s, %s)\n", termSafe(annotationPath(ctx, path)), plural(len(f.Roles), "role"), plural(len(f.Retired), "retired key"))
		}
	default:
		st := app.styles()
		for _, p := range problems {
			fmt.Fprintf(w, "%s: %s: %s\n", st.Bold.Render(termSafe(p.Location(path))), st.Fail.Render(p.Rule), termSafe(p.Message))
		}
		if f != nil {
			fmt.Fprintf(w, "%s %s: no problems (%s, %s)\n", st.OK.Render("✓"), termSafe(path), plural(len(f.Roles), "role"), plural(len(f.Retired), "retired key"))
		}
	}
	if len(problems) > 0 {
		return &InputError{Err: &lintFailedError{
			msg:     fmt.Sprintf("%s is not a valid keys file: %s; fix and run leasectl keys lint again", path, plural(len(problems), "problem")),
			invalid: invalid,
		}}
	}
	return nil
}

// lintFailedError is keys lint's verdict on an invalid file: a one-line
// summary (the problems are listed on stdout) that still carries the
// problems, for the github-actions format.
type lintFailedError struct {
	msg     string
	invalid *keysfile.InvalidError
}

func (e *lintFailedError) Error() string { return e.msg }
func (e *lintFailedError) Unwrap() error { return e.invalid }

type keysDiffOptions struct {
	app              *App
	File             string
	Base             string
	BaseFile         string
	AllowMissingBase bool
	Format           string
}

// newKeysDiffCmd builds `leasectl keys diff`; runF, when not nil, runs
// instead of runKeysDiff with the parsed and checked options (tests).
func newKeysDiffCmd(app *App, runF func(*keysDiffOptions) error) *cobra.Command {
	opts := &keysDiffOptions{app: app}
	c := &cobra.Command{
		Use:   "diff [FILE] [--base REF | --base-file PATH]",
		Short: "Fail on key changes that break a rolling deploy",
		Long: `Compare FILE (default: the --keys file) with its version in the previous
release, and report what changed, each finding with file:line in FILE.

The base is FILE's path at --base REF in git (a tag, branch or commit; the
path is taken relative to the repository root); without --base, the latest
tag reachable from HEAD (when HEAD itself is tagged, the tag before it);
with --base-file PATH, another file. A ref that does not exist, or a file
absent at the ref, is exit 2; --allow-missing-base passes instead when there
is no tag at all or FILE is new since the ref (a first release). In a shallow
clone (actions/checkout's default) the latest tag cannot be known: without
--base, or with a ref the clone lacks, keys diff exits 2 whatever the flags,
and says how to fetch the history (fetch-depth: 0, git fetch --unshallow
--tags).

With -o github-actions every finding and every error is an
annotation on the pull request.

Exit 1 when any finding is an error, 0 otherwise, 2 on invalid input.

Rules:
` + rulesHelp(keyslint.DiffRules()),
		Example: `  leasectl keys diff                          # against the latest tag
  leasectl keys diff --base v1.4.0
  leasectl keys diff deploy/keys.yaml --base origin/main -o github-actions
  leasectl keys diff --base-file /tmp/old-keys.yaml -o json`,
		Args:              maxArgs(1),
		ValidArgsFunction: completeKeysFile,
		RunE: func(c *cobra.Command, args []string) error {
			if err := keysArgs(app, args, &opts.Format, &opts.File); err != nil {
				return err
			}
			if opts.Base != "" && opts.BaseFile != "" {
				return usageErrorf("--base and --base-file exclude each other: compare with a git ref or with a file")
			}
			if runF != nil {
				return runF(opts)
			}
			return runKeysDiff(c.Context(), opts)
		},
	}
	addFormatFlag(c)
	c.Flags().StringVar(&opts.Base, "base", "", "git ref (tag, branch, commit) of the version to compare with (default: the latest tag reachable from HEAD)")
	c.Flags().StringVar(&opts.BaseFile, "base-file", "", "compare with this file instead of a version from git")
	c.Flags().BoolVar(&opts.AllowMissingBase, "allow-missing-base", false, "pass when there is no base: no tag yet, or FILE is new since the ref (a first release)")
	_ = c.RegisterFlagCompletionFunc("base", cobra.NoFileCompletions)
	_ = c.MarkFlagFilename("base-file", "yaml", "yml")
	return c
}

// diffResult is what keys diff found, in the form -o json prints: the
// documented schema of `leasectl keys diff -o json` (docs/json.md).
type diffResult struct {
	docHeader
	File        string        `json:"file"`
	Base        *diffBaseJSON `json:"base"`
	MissingBase *string       `json:"missing_base"`
	// Compatible: no finding is an error; ok in JSON.
	Compatible bool          `json:"-"`
	Errors     int           `json:"errors"`
	Infos      int           `json:"infos"`
	Findings   []findingJSON `json:"findings"`

	baseLabel string
}

type diffBaseJSON struct {
	Source string  `json:"source"` // "git" or "file"
	Ref    *string `json:"ref"`
	Commit *string `json:"commit"`
	Path   string  `json:"path"`
}

type findingJSON struct {
	Rule     string            `json:"rule"`
	Severity keyslint.Severity `json:"severity"`
	File     string            `json:"file"`
	Line     int               `json:"line"`
	Role     *string           `json:"role"`
	Message  string            `json:"message"`
}

func runKeysDiff(ctx context.Context, opts *keysDiffOptions) error {
	app := opts.app
	path := opts.File
	if path == "" {
		path = app.KeysPath()
	}
	head, err := keyslint.LoadHead(path)
	if err != nil {
		return err
	}
	res := &diffResult{File: path, Compatible: true, Findings: []findingJSON{}}
	var base *keysfile.File
	if opts.BaseFile != "" {
		base, err = keyslint.LoadBase(opts.BaseFile)
		var missing *keysfile.NotFoundError
		if errors.As(err, &missing) {
			err = &InputError{Err: fmt.Errorf("--base-file %s not found: pass the path of the keys file to compare with (or --base REF to read it from git)", opts.BaseFile)}
		}
		res.Base = &diffBaseJSON{Source: "file", Path: opts.BaseFile}
		res.baseLabel = opts.BaseFile
	} else {
		var src keyslint.GitSource
		base, src, err = keyslint.LoadFromGit(ctx, path, opts.Base)
		if err == nil {
			res.Base = &diffBaseJSON{Source: "git", Ref: strOrNil(src.Ref), Commit: strOrNil(src.Commit), Path: src.Path}
			res.baseLabel = src.String()
		}
	}
	switch {
	case err != nil && opts.AllowMissingBase && keyslint.IsMissingBase(err):
		msg := err.Error()
		res.MissingBase = &msg
	case err != nil:
		return err
	default:
		for _, f := range keyslint.Diff(base, head) {
			if f.Severity == keyslint.SeverityError {
				res.Errors++
			} else {
				res.Infos++
			}
			res.Findings = append(res.Findings, findingJSON{Rule: f.Rule, Severity: f.Severity, File: path, Line: f.Line, Role: strOrNil(f.Role), Message: f.Message})
		}
		res.Compatible = res.Errors == 0
	}
	if err := renderDiff(ctx, app, opts.Format, res); err != nil {
		return err
	}
	if !res.Compatible {
		return &CheckFailedError{}
	}
	return nil
}

func renderDiff(ctx context.Context, app *App, format string, res *diffResult) error {
	w := app.IO.Out
	switch format {
	case formatJSON:
		res.docHeader = header(res.Compatible)
		return app.writeJSON(w, res)
	case formatGH:
		file := annotationPath(ctx, res.File)
		for _, f := range res.Findings {
			writeAnnotation(w, f.Severity, file, f.Line, f.Rule, f.Message)
		}
		if res.MissingBase != nil {
			// A pass that compared nothing must show on the pull request.
			writeWorkflowCommand(w, "warning", file, 0, "leasectl keys diff", diffSummary(res, file))
			return nil
		}
		fmt.Fprintln(w, termSafe(diffSummary(res, file)))
	default:
		st := app.styles()
		for _, f := range res.Findings {
			sev := st.Info.Render(string(f.Severity))
			if f.Severity == keyslint.SeverityError {
				sev = st.Fail.Render(string(f.Severity))
			}
			fmt.Fprintf(w, "%s: %s %s: %s\n", st.Bold.Render(termSafe(fmt.Sprintf("%s:%d", f.File, f.Line))), sev, f.Rule, termSafe(f.Message))
		}
		if len(res.Findings) > 0 {
			fmt.Fprintln(w)
		}
		mark := st.OK.Render("✓")
		if !res.Compatible {
			mark = st.Fail.Render("✗")
		}
		fmt.Fprintf(w, "%s %s\n", mark, termSafe(diffSummary(res, res.File)))
	}
	return nil
}

func diffSummary(res *diffResult, file string) string {
	switch {
	case res.MissingBase != nil:
		return fmt.Sprintf("%s: nothing to compare with, passing because of --allow-missing-base (%s)", file, *res.MissingBase)
	case !res.Compatible:
		counts := plural(res.Errors, "error")
		if res.Infos > 0 {
			counts += ", " + plural(res.Infos, "note")
		}
		return fmt.Sprintf("%s breaks compatibility with %s: %s", file, res.baseLabel, counts)
	case res.Infos > 0:
		return fmt.Sprintf("%s is compatible with %s: %s", file, res.baseLabel, plural(res.Infos, "note"))
	default:
		return fmt.Sprintf("%s is compatible with %s: no role or key changed", file, res.baseLabel)
	}
}

// readKeysFrom parses a keys file read from r (standard input), named
// name in messages, with the size limit of a file.
func readKeysFrom(r io.Reader, name string) (*keysfile.File, error) {
	data, err := io.ReadAll(io.LimitReader(r, keysfile.MaxFileSize+1))
	if err != nil {
		return nil, &InputError{Err: fmt.Errorf("read %s: %w", name, err)}
	}
	return keysfile.Parse(name, data, keysfile.Options{})
}

// plural renders "1 error", "2 errors".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
