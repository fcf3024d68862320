package doccheck

import (
	"slices"
	"strings"
	"testing"
)

// TestParseExamples: a block with a $ leasectl line is an example when the
// line before its fence names a scenario or a skip with its reason; every
// other case is a problem naming file:line.
func TestParseExamples(t *testing.T) {
	page := strings.Join([]string{
		"# Page",
		"<!-- doccheck: who-one -->",
		"```console",
		"$ leasectl who",
		"server x",
		"$ leasectl who --all",
		"```",
		"<!-- doccheck: skip needs a partition -->",
		"```",
		"$ leasectl probe",
		"```",
		"```console", // 12: unmarked
		"$ leasectl history poller",
		"```",
		"<!-- doccheck: skip -->", // 15: no reason
		"```",
		"$ leasectl who",
		"```",
		"<!-- doccheck: stray -->", // 19: not before a block
		"text",
		"<!-- doccheck: sh-only -->", // 21: no $ leasectl
		"```sh",
		"leasectl who",
		"```",
		"```sh",
		"leasectl who   # not a console block: no $",
		"```",
	}, "\n")
	ex, problems := ParseExamples("p.md", page)
	if len(ex) != 2 || ex[0].Scenario != "who-one" || ex[1].Skip != "needs a partition" {
		t.Fatalf("examples: %+v", ex)
	}
	if c := ex[0].Commands; len(c) != 2 || c[0].Line != 4 || c[0].Text != "leasectl who" || !slices.Equal(c[0].Output, []string{"server x"}) || len(c[1].Output) != 0 {
		t.Errorf("commands: %+v", c)
	}
	for _, want := range []string{"p.md:12: a block with $ leasectl and no doccheck marker", "p.md:15: doccheck: skip needs a reason",
		`p.md:19: doccheck marker "stray" is not on the line before`, `p.md:21: doccheck marker "sh-only" is on a block with no $ leasectl line`} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("no problem %q in:\n%s", want, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != 4 {
		t.Errorf("%d problems, want 4:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

// TestCompare: what varies from run to run (pids, addresses, durations,
// times, the version, column widths, where a note wraps) compares equal;
// anything else is a diff naming both sides.
func TestCompare(t *testing.T) {
	page := []string{
		"server 127.0.0.1:5432 · PostgreSQL 15.18 · database app · as postgres",
		"",
		"ROLE    STATE            PID   APPLICATION      LAST ACTIVITY",
		"poller  HELD, 1 waiting  8843  leasectl run p…  idle 2s",
		"",
		"term: the holder pid 6450 has not renewed its term 17 for 55s, longer",
		"      than a live holder ever lets it go (deadline 23:19:29, in 39m53s)",
		"✓ done in 45.6 ms; more: ...",
	}
	real := []string{
		"server 127.0.0.1:36059 · PostgreSQL 16.4 (Debian 16.4-1) · database app · as postgres",
		"",
		"ROLE    STATE            PID      APPLICATION    LAST ACTIVITY",
		"poller  HELD, 1 waiting  1298843  leasectl run…  idle 0s",
		"",
		"term: the holder pid 16450 has not renewed its term 17 for 1.2s,",
		"      longer than a live holder ever lets it go (deadline 06:01:02, in 4.0s)",
		"✓ done in 1.0 ms; more: whatever follows",
		"",
	}
	if d := Compare(page, real); d != "" {
		t.Errorf("equal up to placeholders, yet:\n%s", d)
	}
	real[3] = "poller  HELD             1298843  leasectl run…  idle 0s"
	d := Compare(page, real)
	if !strings.Contains(d, "- poller  HELD, 1 waiting  <pid>  …  idle <dur>\n") || !strings.Contains(d, "+ poller  HELD  <pid>  …  idle <dur>\n") {
		t.Errorf("diff:\n%s", d)
	}
}
