package cmd

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"
)

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// TestTableLayout: columns left-aligned two blanks apart, as wide as their
// widest cell on the terminal (styles and wide characters measured as
// shown), no trailing blanks, and every row of a long table.
func TestTableLayout(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, true)
	header := []string{"ROLE", "KEY", "STATE", "LAST ACTIVITY"}
	rows := [][]string{
		{"poller", "1840000001", st.OK.Render("HELD") + ", 1 waiting", "idle 3s"},
		{"-", "-9223372036854775808", st.Fail.Render("FREE"), "-"},
		{"réconciliateur", "3,4", "waiting", "waiting 1m02s"},
		{"日本の役割", "1", "", ""},
		{"x", "", "", ""},
	}
	const want = "" +
		"ROLE            KEY                   STATE            LAST ACTIVITY\n" +
		"poller          1840000001            HELD, 1 waiting  idle 3s\n" +
		"-               -9223372036854775808  FREE             -\n" +
		"réconciliateur  3,4                   waiting          waiting 1m02s\n" +
		"日本の役割      1\n" +
		"x\n"
	var plain [][]string
	for _, r := range rows {
		var cells []string
		for _, c := range r {
			cells = append(cells, sgr.ReplaceAllString(c, ""))
		}
		plain = append(plain, cells)
	}
	var out, styled bytes.Buffer
	if err := writeTable(&out, header, plain, tableOptions{}); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	// Styled cells are padded by the width they show.
	if err := layoutTable(&styled, header, rows); err != nil {
		t.Fatal(err)
	}
	if !sgr.MatchString(styled.String()) {
		t.Errorf("the styles are gone:\n%q", styled.String())
	}
	if got := sgr.ReplaceAllString(styled.String(), ""); got != want {
		t.Errorf("styled, without its escape codes:\n%s\nwant:\n%s", got, want)
	}

	var big bytes.Buffer
	var many [][]string
	for i := range 2000 {
		many = append(many, []string{"r", fmt.Sprint(i), "FREE", "-"})
	}
	if err := writeTable(&big, header, many, tableOptions{}); err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(big.Bytes(), []byte("\n")); lines != len(many)+1 {
		t.Errorf("a large table has %d lines, want %d", lines, len(many)+1)
	}
	if want := "r     1999  FREE   -\n"; !bytes.HasSuffix(big.Bytes(), []byte(want)) {
		t.Errorf("a large table ends in %q, want %q", big.Bytes()[big.Len()-30:], want)
	}
}
