package cmd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leasectl/leasectl/keys"
	"github.com/leasectl/leasectl/locks"
)

// What the commands that act on roles (who, failover, verify, run) share:
// loading the role map and resolving ROLE and KEY arguments, in one place
// with one set of messages; and the check that the probe's key (probe,
// verify --pooler-dsn) is no role's.

// loadRoleMap loads the keys file. When keysOptional is true (only numeric
// keys were asked for) a missing file is an empty role map, unless the file
// was named by --keys or LEASECTL_KEYS.
func loadRoleMap(app *App, keysOptional bool) (*keys.File, error) {
	f, err := app.LoadKeys()
	var missing *keys.NotFoundError
	if errors.As(err, &missing) && keysOptional && app.Global.Keys == "" && app.Getenv("LEASECTL_KEYS") == "" {
		return &keys.File{Path: missing.Path}, nil
	}
	return f, err
}

// activeRoleNames returns the active role names of f in file order.
func activeRoleNames(f *keys.File) []string {
	names := make([]string, len(f.Roles))
	for i, e := range f.Roles {
		names[i] = e.Name
	}
	return names
}

// roleByKey returns the active role of f that uses key.
func roleByKey(f *keys.File, key int64) (keys.Entry, bool) {
	for _, e := range f.Roles {
		if e.Key == key {
			return e, true
		}
	}
	return keys.Entry{}, false
}

// keyArgs says what a command takes where it takes a ROLE, besides the
// role names of keys.yaml.
type keyArgs int

const (
	// keysAsArgs: a ROLE or a numeric KEY (k, or k1,k2) argument (who).
	keysAsArgs keyArgs = iota
	// bigintKeysAsArgs: a ROLE or a bigint KEY argument, never k1,k2: a
	// lease holds a bigint key (history, which refuses the pair first).
	bigintKeysAsArgs
	// keysByFlag: a ROLE; a bare key goes through --key (failover, run).
	keysByFlag
	// rolesOnly: a ROLE of keys.yaml, nothing else (verify).
	rolesOnly
)

// roleKey is one role or key a command acts on: the key, and its role's
// name in keys.yaml ("" for a key of no role).
type roleKey struct {
	Role string
	Key  locks.Key
}

// resolveRole is the one resolution of a ROLE (or KEY) argument, for who,
// failover, verify and run: a role name of f, else, as how says, a numeric
// key. verb says what the command does with a key ("fail over"), for the
// hint to --key. Role names start with a letter, so an argument that
// starts with a digit or sign was meant as a key (one out of range, say),
// and "unknown role" would be the wrong complaint.
func resolveRole(f *keys.File, arg string, how keyArgs, verb string) (roleKey, error) {
	if e, ok := f.Role(arg); ok {
		return roleKey{Role: e.Name, Key: locks.BigintKey(e.Key)}, nil
	}
	if how == rolesOnly {
		return roleKey{}, unknownRoleError(arg, f, how)
	}
	k, err := locks.ParseKey(arg)
	switch {
	case err == nil && (how == keysAsArgs || how == bigintKeysAsArgs):
		rk := roleKey{Key: k}
		if e, ok := roleByKey(f, k.ID); ok && k.Form == locks.Bigint {
			rk.Role = e.Name
		}
		return rk, nil
	case err == nil:
		return roleKey{}, usageErrorf("%q is not a role of %s: to %s a bare key, use --key %s", arg, f.Path, verb, arg)
	case !meantAsKey(arg):
		return roleKey{}, unknownRoleError(arg, f, how)
	case how == keysAsArgs || how == bigintKeysAsArgs:
		return roleKey{}, usageErrorf("invalid KEY: %v", err)
	default:
		return roleKey{}, usageErrorf("%q is not a role of %s, nor a valid key for --key: %v", arg, f.Path, err)
	}
}

// resolveRoles resolves each of args as resolveRole does.
func resolveRoles(f *keys.File, args []string, how keyArgs, verb string) ([]roleKey, error) {
	out := make([]roleKey, 0, len(args))
	for _, a := range args {
		rk, err := resolveRole(f, a, how, verb)
		if err != nil {
			return nil, err
		}
		out = append(out, rk)
	}
	return out, nil
}

// meantAsKey reports whether arg was meant as a numeric KEY rather than a
// ROLE: role names start with a letter, so a digit or sign means a key.
func meantAsKey(arg string) bool {
	return arg != "" && strings.ContainsRune("0123456789-+", rune(arg[0]))
}

// unknownRoleError says that name is no role of f, lists the roles it has,
// and, where the command takes keys, how to give one instead.
func unknownRoleError(name string, f *keys.File, how keyArgs) error {
	var instead, orKey string // how to give a key instead, if the command takes one
	switch how {
	case keysAsArgs:
		instead, orKey = "; give a numeric key (k or k1,k2) instead", " (or give a numeric key: k or k1,k2)"
	case bigintKeysAsArgs:
		instead, orKey = "; give a lease's key (an integer) instead", " (or give a lease's key: an integer)"
	case keysByFlag:
		instead, orKey = "; give a bare key with --key N instead", " (or give a bare key with --key N)"
	}
	if len(f.Roles) == 0 {
		return &InputError{Err: fmt.Errorf("unknown role %q: %s has no roles%s", name, f.Path, instead)}
	}
	var mean string
	if near := closest(name, activeRoleNames(f)); near != "" {
		mean = fmt.Sprintf("; did you mean %q?", near)
	}
	return &InputError{Err: fmt.Errorf("unknown role %q: %s has %s%s%s", name, f.Path, strings.Join(activeRoleNames(f), ", "), orKey, mean)}
}

// closest returns the one of names within an edit distance of 2 of name
// (ignoring case) that is nearest, or "".
func closest(name string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(name), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkProbeKeyIsFree refuses a probe key that a role of the keys file uses
// (key 0: a random key of the probe's range, which no role may use):
// probing would contend with, or look like, that role's leader. A missing
// keys file is fine: probe is often run before there is one.
func checkProbeKeyIsFree(app *App, key int64) error {
	f, err := app.LoadKeys()
	if err != nil {
		if _, missing := err.(*keys.NotFoundError); missing && app.Global.Keys == "" && app.Getenv("LEASECTL_KEYS") == "" {
			return nil
		}
		return err
	}
	if key == 0 {
		for _, e := range f.Roles {
			if locks.IsProbeKey(e.Key) {
				return &InputError{Err: fmt.Errorf("role %q in %s uses key %d, in the range the probe takes its keys from (keys lint rejects it): give the role another key, or pass --probe-key", e.Name, f.Path, e.Key)}
			}
		}
		return nil
	}
	if e, ok := roleByKey(f, key); ok {
		return usageErrorf("probe key %d is the key of role %q in %s: pass another --probe-key", key, e.Name, f.Path)
	}
	return nil
}
