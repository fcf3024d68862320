package cmd

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasectl/leasectl/locks"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// What every command shares about its flags: usage errors from cobra and
// pflag, deprecated names, the output formats, and the key flag.

// flagError turns an error of pflag's parser into a usage error, by its type
// (never by its text): an invalid value names the flag and what it takes;
// an unknown flag, the flag of c it was likely meant to be.
func flagError(c *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	if errors.As(err, &invalid) {
		f := invalid.GetFlag()
		return usageErrorf("invalid argument %q for %q: %s", invalid.GetValue(), "--"+f.Name, valueWant(f, invalid.Unwrap()))
	}
	var unknown *pflag.NotExistError
	if errors.As(err, &unknown) && unknown.GetSpecifiedShortnames() == "" {
		if near := nearestFlag(c, unknown.GetSpecifiedName()); near != "" {
			return usageErrorf("%v; did you mean --%s?", err, near)
		}
	}
	return &UsageError{Err: err}
}

// nearestFlag is the flag of c (its own and those it inherits, not the
// hidden ones) that name was likely meant to be, as cobra suggests
// commands: the nearest within an edit distance of 2, ignoring case, else
// the one flag that name begins; "" when there is none.
func nearestFlag(c *cobra.Command, name string) string {
	if c == nil || name == "" {
		return ""
	}
	var names []string
	seen := map[string]bool{}
	for _, fs := range []*pflag.FlagSet{c.Flags(), c.InheritedFlags()} {
		fs.VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !seen[f.Name] {
				seen[f.Name] = true
				names = append(names, f.Name)
			}
		})
	}
	if near := closest(name, names); near != "" {
		return near
	}
	var prefixed []string
	for _, n := range names {
		if strings.HasPrefix(n, strings.ToLower(name)) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// valueWant says what a flag of f's type takes, after cause made its value
// invalid.
func valueWant(f *pflag.Flag, cause error) string {
	switch f.Value.Type() {
	case "duration":
		return "want a duration such as 500ms, 45s, 1m30s or 2h"
	case "int", "int32", "int64", "uint", "uint32", "uint64":
		return "want a whole number"
	case "bool":
		return "want true or false (or the flag alone)"
	}
	return cause.Error()
}

// deprecatedFor is the annotation of a deprecated flag: the name of the flag
// that replaces it.
const deprecatedFor = "leasectl-deprecated-for"

// deprecatedAlias makes the flag old of fs a deprecated alias of replacement
// (a flag of the same command, or a global one): hidden from help and
// completion, and when given, a warning on stderr and its value passed on to
// replacement (see settleDeprecated). Old names live on for a release.
func deprecatedAlias(fs *pflag.FlagSet, old, replacement string) {
	f := fs.Lookup(old)
	f.Hidden = true
	_ = fs.SetAnnotation(old, deprecatedFor, []string{replacement})
}

// settleDeprecated passes the values of the deprecated flags given to c on to
// the flags that replace them, warning on stderr for each. Both names with
// different values is a usage error: one of them would be silently ignored.
func settleDeprecated(app *App, c *cobra.Command) error {
	var err error
	fs := c.Flags()
	fs.Visit(func(old *pflag.Flag) {
		names := old.Annotations[deprecatedFor]
		if err != nil || len(names) == 0 {
			return
		}
		repl := fs.Lookup(names[0])
		fmt.Fprintf(app.IO.ErrOut, "warning: --%s is deprecated and will be removed in a later release: use %s\n", old.Name, flagName(repl))
		switch {
		case repl.Changed && repl.Value.String() != old.Value.String():
			err = usageErrorf("%s %s and --%s %s conflict: give %s alone (--%s is its deprecated name)",
				flagName(repl), repl.Value, old.Name, old.Value, flagName(repl), old.Name)
		case !repl.Changed:
			err = fs.Set(repl.Name, old.Value.String())
		}
	})
	return err
}

// flagName renders f as help shows it: "-o/--output", "--wait".
func flagName(f *pflag.Flag) string {
	if f.Shorthand != "" {
		return "-" + f.Shorthand + "/--" + f.Name
	}
	return "--" + f.Name
}

// The output formats (-o).
const (
	formatText = "text"
	formatJSON = "json"
	formatGH   = "github-actions"
)

// outputsAnnotation lists the output formats a command supports, when they
// are not text and json.
const outputsAnnotation = "leasectl-outputs"

// setOutputs declares the output formats of c and its subcommands.
func setOutputs(c *cobra.Command, formats ...string) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[outputsAnnotation] = strings.Join(formats, ",")
}

// outputs returns the output formats c supports: its own declaration, else
// its nearest parent's, else text and json.
func outputs(c *cobra.Command) []string {
	for p := c; p != nil; p = p.Parent() {
		if v, ok := p.Annotations[outputsAnnotation]; ok {
			return strings.Split(v, ",")
		}
	}
	return []string{formatText, formatJSON}
}

// checkOutput refuses an output format that c does not have: a format that
// would be silently ignored.
func checkOutput(c *cobra.Command, output string) error {
	formats := outputs(c)
	switch {
	case slices.Contains(formats, output):
		return nil
	case output == outputWide:
		return usageErrorf("invalid -o/--output %q: use %s (wide is for leasectl who and leasectl history only)", output, orList(formats))
	case len(formats) == 1:
		return usageErrorf("invalid -o/--output %q: %q has only %s output", output, c.CommandPath(), formats[0])
	default:
		return usageErrorf("invalid -o/--output %q: use %s", output, orList(formats))
	}
}

// orList renders "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// keyFlag is the value of a --key or --probe-key flag: a key as
// locks.ParseKey reads it, which every command shares (decimal, 0x hex,
// k1,k2 for the two-int4 form where pairs are allowed).
type keyFlag struct {
	key       locks.Key
	set       bool
	pairs     bool   // the two-int4 form is allowed
	noPairWhy string // why not, when it is not
}

func (k *keyFlag) String() string {
	if !k.set {
		return ""
	}
	return k.key.String()
}

func (k *keyFlag) Set(s string) error {
	if k.set {
		return fmt.Errorf("given twice (%s, then %s): give one key", k.key, s)
	}
	key, err := locks.ParseKey(s)
	if err != nil {
		return err
	}
	if key.Form == locks.Pair && !k.pairs {
		return fmt.Errorf("%s is the two-int4 form, and %s", s, k.noPairWhy)
	}
	k.key, k.set = key, true
	return nil
}

func (k *keyFlag) Type() string { return "key" }

// outputWide is who's -o wide: text with every column.
const outputWide = "wide"

// onceFlag is a string flag that may be given once: pflag keeps the last of
// repeated values, which for run's --role meant holding one role while the
// user asked for two. why says what to do instead.
type onceFlag struct {
	value *string
	set   bool
	why   string
}

func (o *onceFlag) String() string { return *o.value }
func (o *onceFlag) Type() string   { return "string" }

func (o *onceFlag) Set(s string) error {
	if o.set {
		return fmt.Errorf("given twice (%q, then %q): %s", *o.value, s, o.why)
	}
	*o.value, o.set = s, true
	return nil
}

// checkEmptyDSNFlags refuses a DSN flag (--dsn, and every --*-dsn of c)
// given an empty value: that is almost always an unset environment
// variable (--pooler-dsn "$PGBOUNCER_TX_DSN"), and taken as "not given" it
// would check or connect to something other than what was meant (a
// skipped check, or libpq's default server). Probe checks its DSN
// argument itself (emptyDSNError).
func checkEmptyDSNFlags(c *cobra.Command) error {
	var err error
	c.Flags().Visit(func(f *pflag.Flag) {
		if err != nil || (f.Name != "dsn" && !strings.HasSuffix(f.Name, "-dsn")) || f.Value.String() != "" {
			return
		}
		instead, lab := "leave --"+f.Name+" out", "$LEASECTL_DSN and the lab's other DSNs"
		switch f.Name {
		case "dsn":
			instead += " to use $LEASECTL_DSN, $DATABASE_URL or libpq's PG* variables"
		case "pooler-dsn":
			lab = "$LEASECTL_LAB_TX_DSN, its PgBouncer in transaction mode"
		}
		err = emptyDSNError("--"+f.Name, "--"+f.Name+` "$VAR"`, instead, lab)
	})
	return err
}

// emptyDSNError says that what (a flag, or probe's DSN argument) was given
// an empty value, as in asIn, and what to do instead; lab names the lab's
// variables that would do.
func emptyDSNError(what, asIn, instead, lab string) error {
	return usageErrorf(`%s was given an empty value, likely an unset environment variable (%s): give a DSN, or %s; in the lab, eval "$(leasectl lab env)" sets %s`,
		what, asIn, instead, lab)
}
