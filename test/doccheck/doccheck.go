// Package doccheck checks leasectl's markdown documentation: every relative
// link in README.md and docs/**/*.md must name a file of the repository and,
// with a #fragment, a heading of that file; no link or bare URL may lead
// outside the repository. Its tests also hold the README to its size and its
// two set-up commands, and run `make install` into a staging directory.
// [Examples] finds the pages' `$ leasectl` blocks, which cmd's
// TestDocExamples runs against a lab and checks with [Compare];
// [GoBlocks] finds their ```go blocks, which TestGoBlocks compiles against
// this module with [BuildGoBlocks].
package doccheck

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// ReadmeLimit is the README's size limit in bytes: a front page, with the
// rest under docs/.
const ReadmeLimit = 12288

// Files are the markdown files the checks cover, relative to the
// repository's root, in a stable order: README.md and every .md under docs/.
func Files(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(files[1:])
	return files, err
}

// Link is a markdown link found in a file, outside code.
type Link struct {
	Line   int
	Target string
}

var (
	fence      = regexp.MustCompile("^ {0,3}(```|~~~)")
	inlineLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^\s)>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	autoLink   = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9+.-]*:[^\s>]*)>`)
	bareURL    = regexp.MustCompile(`\b(?:https?|ftp)://[^\s)>\]]+`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose returns the file's lines with fenced code blocks blanked and each
// code span replaced by the word "code" (so that nothing in code counts as a
// link), or by its content when keep is set (for headings' ids).
func prose(text string, keep bool) []string {
	lines := strings.Split(text, "\n")
	var open string
	for i, l := range lines {
		if m := fence.FindStringSubmatch(l); m != nil {
			if open == "" {
				open = m[1]
			} else if m[1] == open {
				open = ""
			}
			lines[i] = ""
			continue
		}
		if open != "" {
			lines[i] = ""
			continue
		}
		lines[i] = stripCode(l, keep)
	}
	return lines
}

// stripCode replaces each code span of a line (a run of backticks up to the
// next run of the same length) with the word "code", or with its content
// when keep is set; an unmatched run stays.
func stripCode(l string, keep bool) string {
	var b strings.Builder
	for i := 0; i < len(l); {
		if l[i] != '`' {
			b.WriteByte(l[i])
			i++
			continue
		}
		n := 1
		for i+n < len(l) && l[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(l); {
			if l[j] != '`' {
				j++
				continue
			}
			m := 1
			for j+m < len(l) && l[j+m] == '`' {
				m++
			}
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 {
			b.WriteString(l[i : i+n])
			i += n
			continue
		}
		if keep {
			b.WriteString(strings.TrimSpace(l[i+n : end-n]))
		} else {
			b.WriteString("code")
		}
		i = end
	}
	return b.String()
}

// Links returns every link of a markdown text outside code: inline links
// and images, reference definitions, autolinks and bare URLs.
func Links(text string) []Link {
	var out []Link
	for i, l := range prose(text, false) {
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			out = append(out, Link{i + 1, m[2]})
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			out = append(out, Link{i + 1, m[1]})
		}
		rest := inlineLink.ReplaceAllString(l, "")
		for _, m := range autoLink.FindAllStringSubmatch(rest, -1) {
			out = append(out, Link{i + 1, m[1]})
		}
		rest = autoLink.ReplaceAllString(rest, "")
		for _, m := range bareURL.FindAllString(rest, -1) {
			out = append(out, Link{i + 1, m})
		}
	}
	return out
}

// Anchors returns the #fragments a markdown text offers: GitHub's ids of its
// headings (lower case, punctuation dropped, spaces as hyphens, -1, -2 … for
// repeats) and the ids of HTML anchors.
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text, true) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		id := Slug(m[2])
		if n := seen[id]; n > 0 {
			out[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

// Slug is GitHub's id for a heading's text, with code spans already
// replaced by their content: links keep their text, and only letters, digits,
// spaces, hyphens and underscores remain.
func Slug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Check returns one problem per link of the file rel (relative to root)
// that is broken or leaves the repository.
func Check(root, rel string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	var problems []string
	bad := func(l Link, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s", rel, l.Line, l.Target, fmt.Sprintf(format, args...)))
	}
	self := string(data)
	for _, l := range Links(self) {
		if l.Target == "" {
			bad(l, "empty target")
			continue
		}
		if scheme.MatchString(l.Target) || strings.HasPrefix(l.Target, "//") {
			bad(l, "points outside the repository; the docs cite only the repository's own files")
			continue
		}
		target, frag, _ := strings.Cut(l.Target, "#")
		target, err := url.PathUnescape(target)
		if err != nil {
			bad(l, "bad escape: %v", err)
			continue
		}
		file := rel
		if target != "" {
			if strings.HasPrefix(target, "/") {
				bad(l, "absolute path: use a path relative to %s", rel)
				continue
			}
			file = path.Clean(path.Join(path.Dir(rel), target))
			if file == ".." || strings.HasPrefix(file, "../") {
				bad(l, "leaves the repository")
				continue
			}
			st, err := os.Stat(filepath.Join(root, filepath.FromSlash(file)))
			if err != nil {
				bad(l, "no such file in the repository (%s)", file)
				continue
			}
			if st.IsDir() {
				if frag != "" {
					bad(l, "a #fragment on a directory")
				}
				continue
			}
		}
		if frag == "" {
			continue
		}
		if !strings.HasSuffix(file, ".md") {
			bad(l, "a #fragment on a file that is not markdown")
			continue
		}
		body := self
		if file != rel {
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
			if err != nil {
				return nil, err
			}
			body = string(b)
		}
		if !Anchors(body)[frag] {
			bad(l, "%s has no heading or anchor #%s", file, frag)
		}
	}
	return problems, nil
}
