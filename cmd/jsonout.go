package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"runtime"
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
	// indent[:1+len(prefix)+2*depth] is the line break at depth.
	indent := make([]byte, 0, 1+len(prefix)+16)
	indent = append(append(indent, '\n'), prefix...)
	depth := 0
	newline := func() {
		for n := 1 + len(prefix) + 2*depth; len(indent) < n; {
			indent = append(indent, ' ')
		}
		dst = append(dst, indent[:1+len(prefix)+2*depth]...)
	}
	for i := 0; i < len(src); {
		// A run of bytes that stay as they are (numbers, true, false,
		// null, and strings) is copied at once.
		j := i
	run:
		for ; j < len(src); j++ {
			switch jsonClass[src[j]] {
			case jsonQuote:
				for j++; src[j] != '"'; j++ {
					if src[j] == '\\' {
						j++
					}
				}
			case jsonStructural:
				break run
			}
		}
		dst = append(dst, src[i:j]...)
		if j == len(src) {
			break
		}
		switch c := src[j]; c {
		case '{', '[':
			if j+1 < len(src) && src[j+1] == c+2 { // {} or [], which stay as they are
				dst = append(dst, c, c+2)
				j++
				break
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
		}
		i = j + 1
	}
	return dst
}

// jsonClass sorts the bytes of compact JSON for appendIndent: those it
// changes the layout around, the quote that starts a string, and the rest.
var jsonClass = [256]uint8{'{': jsonStructural, '}': jsonStructural, '[': jsonStructural, ']': jsonStructural,
	',': jsonStructural, ':': jsonStructural, '"': jsonQuote}

const (
	jsonStructural = 1 + iota
	jsonQuote
)

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
// being elem(i). elem must be safe to call from several goroutines at once:
// the elements are encoded in chunks, by as many goroutines as there are
// CPUs, and written in order. With 10,000 leases the encoding is most of
// who --all -o json's own time, and it runs after the server has answered,
// while its CPUs sit idle.
func (o *jsonObject) Array(name string, n int, elem func(i int) any) {
	o.key(name)
	if n == 0 {
		o.w.WriteString("[]")
		return
	}
	o.w.WriteByte('[')
	chunks := (n + arrayChunk - 1) / arrayChunk
	workers := min(runtime.GOMAXPROCS(0), chunks)
	type part struct {
		b   []byte
		err error
	}
	// Chunk c is worker c%workers's; each worker has at most two chunks
	// encoded ahead of the writer, in two buffers it reuses.
	out := make([]chan part, workers)
	free := make([]chan []byte, workers)
	quit := make(chan struct{})
	defer close(quit)
	for w := range workers {
		out[w], free[w] = make(chan part, 1), make(chan []byte, 2)
		free[w] <- nil
		free[w] <- nil
		go func() {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			for c := w; c < chunks; c += workers {
				var b []byte
				select {
				case b = <-free[w]:
				case <-quit:
					return
				}
				b, err := encodeChunk(b[:0], enc, &buf, c*arrayChunk, min(n, (c+1)*arrayChunk), elem)
				select {
				case out[w] <- part{b, err}:
				case <-quit:
					return
				}
			}
		}()
	}
	for c := range chunks {
		p := <-out[c%workers]
		if p.err != nil {
			if o.err == nil {
				o.err = p.err
			}
			return
		}
		o.w.Write(p.b)
		free[c%workers] <- p.b
	}
	o.w.WriteString("\n  ]")
}

// arrayChunk is how many elements of an Array one goroutine encodes at a
// time.
const arrayChunk = 64

// encodeChunk appends elements lo to hi-1 of an Array to dst, each on a
// line of its own, using enc, which writes into buf. The chunk is encoded
// in one call into encoding/json, as an array, whose elements are then
// indented as those of the Array.
func encodeChunk(dst []byte, enc *json.Encoder, buf *bytes.Buffer, lo, hi int, elem func(i int) any) ([]byte, error) {
	elems := make([]any, 0, hi-lo)
	for i := lo; i < hi; i++ {
		elems = append(elems, elem(i))
	}
	buf.Reset()
	if err := enc.Encode(elems); err != nil {
		return dst, err
	}
	if lo > 0 {
		dst = append(dst, ',')
	}
	inner := bytes.TrimSuffix(buf.Bytes(), []byte("]\n"))[1:] // the elements, without [ and ]
	return appendIndent(append(dst, "\n    "...), inner, "    "), nil
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
