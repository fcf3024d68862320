package cmd

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"
)

var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// TestColumnsMatchTablewriter holds the two table paths to one layout: a
// table grows past tablewriterMaxRows without changing how it looks.
func TestColumnsMatchTablewriter(t *testing.T) {
	st := newStyles(&bytes.Buffer{}, true)
	header := []string{"ROLE", "KEY", "STATE", "LAST ACTIVITY"}
	rows := [][]string{
		{"poller", "1840000001", st.OK.Render("HELD") + ", 1 waiting", "idle 3s"},
		{"-", "-9223372036854775808", st.Fail.Render("FREE"), "-"},
		{"réconciliateur", "3,4", "waiting", "waiting 1m02s"},
		{"x", "", "", ""},
	}
	for _, color := range []bool{false, true} {
		in := rows
		if !color {
			in = nil
			for _, r := range rows {
				var plain []string
				for _, c := range r {
					plain = append(plain, sgr.ReplaceAllString(c, ""))
				}
				in = append(in, plain)
			}
		}
		var viaTablewriter, viaColumns bytes.Buffer
		if err := layoutTable(&viaTablewriter, header, in); err != nil {
			t.Fatal(err)
		}
		if err := writeColumns(&viaColumns, header, in); err != nil {
			t.Fatal(err)
		}
		a, b := viaTablewriter.String(), viaColumns.String()
		if color {
			a, b = sgr.ReplaceAllString(a, ""), sgr.ReplaceAllString(b, "")
		}
		if a != b {
			t.Errorf("color %v: tablewriter and writeColumns differ:\n%s\n---\n%s", color, a, b)
		}
		if color && !sgr.MatchString(viaColumns.String()) {
			t.Errorf("writeColumns dropped the styles")
		}
	}

	var big bytes.Buffer
	var many [][]string
	for i := range tablewriterMaxRows + 1 {
		many = append(many, []string{"r", fmt.Sprint(i), "FREE", "-"})
	}
	if err := writeTable(&big, header, many, tableOptions{}); err != nil {
		t.Fatal(err)
	}
	if lines := bytes.Count(big.Bytes(), []byte("\n")); lines != len(many)+1 {
		t.Errorf("a large table has %d lines, want %d", lines, len(many)+1)
	}
}
