package keyslint

import (
	"fmt"
	"sort"

	"github.com/leasectl/leasectl/internal/keysfile"
)

// Finding is one difference between a base and a head keys file that a
// rule reports, located in the head file.
type Finding struct {
	Rule     string
	Severity Severity
	// Path and Line locate the finding in the head file. A removed role is
	// reported at the head's "roles:" line.
	Path string
	Line int
	// Role is the role the finding is about.
	Role    string
	Message string
}

// Diff compares head, the new version of a keys file, with base, the
// version the running binaries use, and returns what the rules find, in line
// order. The files need only be of a valid form ([LoadBase]): a key shared
// within the head is reported as DUPLICATE_KEY, not refused.
func Diff(base, head *keysfile.File) []Finding {
	d := differ{base: base, head: head, owners: map[int64][]owner{}}
	for _, e := range base.Roles {
		d.owners[e.Key] = append(d.owners[e.Key], owner{Entry: e})
	}
	for _, e := range base.Retired {
		d.owners[e.Key] = append(d.owners[e.Key], owner{Entry: e, retired: true})
	}
	for _, p := range sharedKeys(head) {
		d.add(RuleDuplicateKey, SeverityError, p.Line, p.Role, "%s", p.Message)
	}
	renamed := map[string]bool{}
	for _, e := range head.Roles {
		if from, ok := d.headRole(e); ok {
			renamed[from] = true
		}
	}
	for _, b := range base.Roles {
		if _, ok := head.Role(b.Name); !ok && !renamed[b.Name] {
			d.goneRole(b)
		}
	}
	sort.SliceStable(d.findings, func(i, j int) bool {
		a, b := d.findings[i], d.findings[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Rule < b.Rule
	})
	return d.findings
}

// owner is a role that held a key in the base.
type owner struct {
	keysfile.Entry
	retired bool
}

func (o owner) describe() string {
	if o.retired {
		return fmt.Sprintf("retired role %q", o.Name)
	}
	return fmt.Sprintf("role %q", o.Name)
}

type differ struct {
	base, head *keysfile.File
	owners     map[int64][]owner
	findings   []Finding
}

func (d *differ) add(rule string, sev Severity, line int, role, format string, args ...any) {
	d.findings = append(d.findings, Finding{Rule: rule, Severity: sev, Path: d.head.Path, Line: line, Role: role, Message: fmt.Sprintf(format, args...)})
}

// headRole applies the rules to one active role of the head. It returns the
// base role that e renames, if it does.
func (d *differ) headRole(e keysfile.Entry) (renamedFrom string, renamed bool) {
	var others []owner
	for _, o := range d.owners[e.Key] {
		if o.Name != e.Name {
			others = append(others, o)
		}
	}
	if b, ok := d.base.Role(e.Name); ok {
		if b.Key != e.Key {
			d.add(RuleKeyChanged, SeverityError, e.Line, e.Name,
				"role %q changed its key from %d to %d: during a rolling deploy old binaries lock %d and new ones %d, so both lead; put back %d (to move a role to a new key, add a role with a new name and retire this one)",
				e.Name, b.Key, e.Key, b.Key, e.Key, b.Key)
			d.reused(e, others)
		}
		return "", false
	}
	if len(others) == 1 && !others[0].retired && d.gone(others[0].Name) && d.onlyHolder(e) {
		from := others[0]
		d.add(RuleRoleRenamed, SeverityInfo, e.Line, e.Name,
			"role %q was renamed to %q (same key %d): during the rollout old binaries run %q and new ones %q, and both names contend for the one lock, so only one replica leads; make sure both do the same job",
			from.Name, e.Name, e.Key, from.Name, e.Name)
		return from.Name, true
	}
	if len(others) > 0 {
		d.reused(e, others)
		return "", false
	}
	if r, ok := d.base.RetiredRole(e.Name); ok {
		d.add(RuleRoleAdded, SeverityInfo, e.Line, e.Name, "retired role %q is active again, with key %d (it was retired with key %d)", e.Name, e.Key, r.Key)
		return "", false
	}
	d.add(RuleRoleAdded, SeverityInfo, e.Line, e.Name, "role %q was added with key %d", e.Name, e.Key)
	return "", false
}

// reused reports e's key as one that other roles held in the base.
func (d *differ) reused(e keysfile.Entry, others []owner) {
	for _, o := range others {
		why := fmt.Sprintf("binaries of the base still lock it for %q, so the two roles contend and one of them never leads", o.Name)
		if o.retired {
			why = fmt.Sprintf("a retired key is never reused, since binaries older than the base may still lock it for %q", o.Name)
		}
		d.add(RuleKeyReused, SeverityError, e.Line, e.Name,
			"role %q uses key %d, which belonged to %s in the base: %s; give %q a key no role ever had",
			e.Name, e.Key, o.describe(), why, e.Name)
	}
}

// gone reports whether the head lists name nowhere, active or retired.
func (d *differ) gone(name string) bool {
	_, active := d.head.Role(name)
	_, retired := d.head.RetiredRole(name)
	return !active && !retired
}

// onlyHolder reports whether e is the only entry of the head with its key.
func (d *differ) onlyHolder(e keysfile.Entry) bool {
	n := 0
	for _, list := range [][]keysfile.Entry{d.head.Roles, d.head.Retired} {
		for _, x := range list {
			if x.Key == e.Key {
				n++
			}
		}
	}
	return n == 1
}

// goneRole applies the rules to a base role that the head no longer lists
// as active and that no head role renames.
func (d *differ) goneRole(b keysfile.Entry) {
	r, ok := d.head.RetiredRole(b.Name)
	switch {
	case ok && r.Key == b.Key:
		d.add(RuleRoleRetired, SeverityInfo, r.Line, b.Name, "role %q was retired; its key %d stays reserved under retired:", b.Name, b.Key)
	case ok:
		d.add(RuleRoleRemoved, SeverityError, r.Line, b.Name,
			"role %q moved to retired: with key %d, but it used key %d: a retired entry keeps the key the role had, so that key is never reused; write %s: %d",
			b.Name, r.Key, b.Key, b.Name, b.Key)
	default:
		d.add(RuleRoleRemoved, SeverityError, d.head.RolesLine, b.Name,
			"role %q (key %d) was removed: move it under retired: with the same key (%s: %d) so that the key is never given to another role while old binaries still use it",
			b.Name, b.Key, b.Name, b.Key)
	}
}
