package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// One JSON convention for every document leasectl prints with -o json
// (docs/json.md, held to the commands by TestJSONConvention):
//
//   - every document starts with schema_version and ok (docHeader);
//   - advisory keys are strings (JSON numbers lose int64 precision), in
//     every field named key or ending in _key;
//   - durations are milliseconds, in fields ending in _ms (msOf);
//   - a field that does not apply is null, never left out;
//   - output is indented by two spaces and ends with a newline.

// schemaVersion is the schema_version of every document: it goes up when a
// field is removed or renamed or changes its type (new fields may be added
// within a version).
const schemaVersion = 1

// docHeader opens every JSON document.
type docHeader struct {
	SchemaVersion int `json:"schema_version"`
	// OK is the command's verdict: true exactly when it exits 0 (who
	// without --check: what --check would say).
	OK bool `json:"ok"`
}

func header(ok bool) docHeader { return docHeader{SchemaVersion: schemaVersion, OK: ok} }

// writeJSON writes v as one JSON document: indented by two spaces, with a
// newline at the end.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// msOf is d in milliseconds, to the microsecond.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// msPtr is msOf(d) for a nullable field.
func msPtr(d time.Duration) *float64 {
	ms := msOf(d)
	return &ms
}

// strOrNil is s, or nil (JSON null) when s is empty.
func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// jsonObject writes one JSON document, an object, field by field to a
// buffered writer, so that a large array (who --all: 10,000 leases) is
// encoded one element at a time instead of as one document in memory. The
// bytes are those writeJSON writes for the same fields in the same order.
type jsonObject struct {
	w      *bufio.Writer
	buf    bytes.Buffer
	enc    *json.Encoder // into buf
	app    jsonAppender
	fields int
	err    error
}

func newJSONObject(w io.Writer) *jsonObject {
	o := &jsonObject{w: bufio.NewWriterSize(w, 64<<10)}
	o.enc = json.NewEncoder(&o.buf)
	o.w.WriteByte('{')
	return o
}

// encode returns v indented as a value whose lines start with prefix,
// without the newline Encode adds; valid until the next call.
func (o *jsonObject) encode(prefix string, v any) []byte {
	o.buf.Reset()
	o.enc.SetIndent(prefix, "  ")
	if err := o.enc.Encode(v); err != nil && o.err == nil {
		o.err = err
	}
	return bytes.TrimSuffix(o.buf.Bytes(), []byte("\n"))
}

// key starts the next field; name needs no escaping.
func (o *jsonObject) key(name string) {
	if o.fields > 0 {
		o.w.WriteByte(',')
	}
	o.fields++
	o.w.WriteString("\n  \"")
	o.w.WriteString(name)
	o.w.WriteString(`": `)
}

// Field writes one field.
func (o *jsonObject) Field(name string, v any) {
	o.key(name)
	o.w.Write(o.encode("  ", v))
}

// Header writes schema_version and ok.
func (o *jsonObject) Header(h docHeader) {
	o.Field("schema_version", h.SchemaVersion)
	o.Field("ok", h.OK)
}

// Array writes a field whose value is an array of n elements, element i
// being elem(i).
func (o *jsonObject) Array(name string, n int, elem func(i int) any) {
	o.key(name)
	if n == 0 {
		o.w.WriteString("[]")
		return
	}
	o.w.WriteByte('[')
	for i := range n {
		if i > 0 {
			o.w.WriteByte(',')
		}
		o.w.WriteString("\n    ")
		v := elem(i)
		if f, ok := v.(jsonAppendable); ok {
			o.app = jsonAppender{b: o.app.b[:0], prefix: "    "}
			f.appendJSON(&o.app)
			o.w.Write(o.app.b)
			continue
		}
		o.w.Write(o.encode("    ", v))
		if o.err != nil {
			return
		}
	}
	o.w.WriteString("\n  ]")
}

// Close ends the document and flushes it.
func (o *jsonObject) Close() error {
	if o.fields == 0 {
		o.w.WriteString("}\n")
	} else {
		o.w.WriteString("\n}\n")
	}
	if err := o.w.Flush(); err != nil {
		return err
	}
	return o.err
}

// jsonAppendable is a value that appends itself as JSON, faster than
// encoding/json's reflection and with the same bytes: who's leases, which
// `who --all` prints by the thousand.
type jsonAppendable interface {
	appendJSON(a *jsonAppender)
}

// jsonAppender appends indented JSON laid out as json.MarshalIndent lays
// it out: every field and element on a line of its own, starting with
// prefix and two spaces a level; an empty object or array as {} or [].
// Strings, numbers and times are written as encoding/json writes them.
type jsonAppender struct {
	b      []byte
	prefix string
	counts []int // fields or elements written in each open object or array
}

func (a *jsonAppender) newline() {
	a.b = append(a.b, '\n')
	a.b = append(a.b, a.prefix...)
	for range a.counts {
		a.b = append(a.b, ' ', ' ')
	}
}

func (a *jsonAppender) open(c byte) {
	a.b = append(a.b, c)
	a.counts = append(a.counts, 0)
}

func (a *jsonAppender) close(c byte) {
	n := a.counts[len(a.counts)-1]
	a.counts = a.counts[:len(a.counts)-1]
	if n > 0 {
		a.newline()
	}
	a.b = append(a.b, c)
}

// item starts the next field or element of the innermost object or array.
func (a *jsonAppender) item() {
	if a.counts[len(a.counts)-1] > 0 {
		a.b = append(a.b, ',')
	}
	a.counts[len(a.counts)-1]++
	a.newline()
}

// key starts a field; name needs no escaping.
func (a *jsonAppender) key(name string) {
	a.item()
	a.b = append(a.b, '"')
	a.b = append(a.b, name...)
	a.b = append(a.b, '"', ':', ' ')
}

func (a *jsonAppender) null() { a.b = append(a.b, "null"...) }

func (a *jsonAppender) bool(v bool) { a.b = strconv.AppendBool(a.b, v) }

func (a *jsonAppender) int(v int64) { a.b = strconv.AppendInt(a.b, v, 10) }

func (a *jsonAppender) int32Ptr(v *int32) {
	if v == nil {
		a.null()
		return
	}
	a.int(int64(*v))
}

// float writes v as encoding/json writes a float64.
func (a *jsonAppender) float(v float64) {
	format := byte('f')
	if abs := math.Abs(v); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	a.b = strconv.AppendFloat(a.b, v, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does
		if n := len(a.b); n >= 4 && a.b[n-4] == 'e' && a.b[n-3] == '-' && a.b[n-2] == '0' {
			a.b[n-2] = a.b[n-1]
			a.b = a.b[:n-1]
		}
	}
}

func (a *jsonAppender) floatPtr(v *float64) {
	if v == nil {
		a.null()
		return
	}
	a.float(*v)
}

func (a *jsonAppender) time(t time.Time) {
	a.b = append(a.b, '"')
	a.b = t.AppendFormat(a.b, time.RFC3339Nano)
	a.b = append(a.b, '"')
}

func (a *jsonAppender) timePtr(t *time.Time) {
	if t == nil {
		a.null()
		return
	}
	a.time(*t)
}

func (a *jsonAppender) strPtr(s *string) {
	if s == nil {
		a.null()
		return
	}
	a.str(*s)
}

// str writes s quoted and escaped as encoding/json does by default: <, >
// and & escaped for HTML, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped.
func (a *jsonAppender) str(s string) {
	const hex = "0123456789abcdef"
	b := append(a.b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	a.b = append(b, '"')
}
