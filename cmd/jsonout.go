package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"time"
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
	enc    *json.Encoder // into buf, compact
	line   []byte
	fields int
	err    error
}

func newJSONObject(w io.Writer) *jsonObject {
	o := &jsonObject{w: bufio.NewWriterSize(w, 64<<10)}
	o.enc = json.NewEncoder(&o.buf)
	o.w.WriteByte('{')
	return o
}

// value writes v, encoded by encoding/json, indented as a value whose lines
// start with prefix.
func (o *jsonObject) value(prefix string, v any) {
	o.buf.Reset()
	if err := o.enc.Encode(v); err != nil && o.err == nil {
		o.err = err
	}
	o.line = appendIndent(o.line[:0], bytes.TrimSuffix(o.buf.Bytes(), []byte("\n")), prefix)
	o.w.Write(o.line)
}

// appendIndent appends src, compact JSON as encoding/json writes it (no
// blanks outside strings), indented as json.Indent(dst, src, prefix, "  ")
// indents it (FuzzAppendIndent). A twin of json.Indent, whose scanner
// checks the syntax again: without it who --all -o json misses its target
// (docs/benchmarks.md).
func appendIndent(dst, src []byte, prefix string) []byte {
	depth := 0
	newline := func() {
		dst = append(dst, '\n')
		dst = append(dst, prefix...)
		for range depth {
			dst = append(dst, ' ', ' ')
		}
	}
	for i := 0; i < len(src); i++ {
		switch c := src[i]; c {
		case '"':
			j := i + 1
			for ; src[j] != '"'; j++ {
				if src[j] == '\\' {
					j++
				}
			}
			dst = append(dst, src[i:j+1]...)
			i = j
		case '{', '[':
			if src[i+1] == c+2 { // {} or [], which stay as they are
				dst = append(dst, c, c+2)
				i++
				continue
			}
			dst = append(dst, c)
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			dst = append(dst, c)
		case ',':
			dst = append(dst, c)
			newline()
		case ':':
			dst = append(dst, ':', ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
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
	o.value("  ", v)
}

// Header writes schema_version and ok.
func (o *jsonObject) Header(h docHeader) {
	o.Field("schema_version", h.SchemaVersion)
	o.Field("ok", h.OK)
}

// Array writes a field whose value is an array of n elements, element i
// being elem(i), each encoded as soon as it is made.
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
		o.value("    ", elem(i))
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
