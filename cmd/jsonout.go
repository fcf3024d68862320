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
//   - a document ends with a newline: it is compact, on one line, when
//     stdout is not a terminal, and indented by two spaces (the layout of
//     json.MarshalIndent) when it is (App.writeJSON), as gh does.

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

// writeJSON writes v as one JSON document with a newline at the end:
// indented by two spaces when indent is set, else compact, on one line.
func writeJSON(w io.Writer, v any, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

// writeJSON writes v as one JSON document to w, which is stdout or a
// buffer bound for it: indented on a terminal, compact otherwise
// (docs/json.md).
func (a *App) writeJSON(w io.Writer, v any) error { return writeJSON(w, v, a.indentJSON()) }

// indentJSON reports whether JSON documents are indented: when stdout is a
// terminal, where a person reads them (`| jq .` indents a pipe's).
func (a *App) indentJSON() bool { return a.IO.OutTTY }

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
// bytes are those writeJSON writes for the same fields in the same order,
// compact or indented alike.
type jsonObject struct {
	w      *bufio.Writer
	indent bool
	buf    bytes.Buffer
	enc    *json.Encoder // into buf
	fields int
	err    error
}

func newJSONObject(w io.Writer, indent bool) *jsonObject {
	o := &jsonObject{w: bufio.NewWriterSize(w, 64<<10), indent: indent}
	o.enc = newElemEncoder(&o.buf, indent)
	o.w.WriteByte('{')
	return o
}

// newElemEncoder encodes the value of a field of a jsonObject, or an array
// of elements of its Array, into buf: compact, or indented as a value one
// level down (its lines after the first start with two spaces).
func newElemEncoder(buf *bytes.Buffer, indent bool) *json.Encoder {
	enc := json.NewEncoder(buf)
	if indent {
		enc.SetIndent("  ", "  ")
	}
	return enc
}

func (o *jsonObject) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// key starts the next field; name needs no escaping.
func (o *jsonObject) key(name string) {
	if o.fields > 0 {
		o.w.WriteByte(',')
	}
	o.fields++
	if o.indent {
		o.w.WriteString("\n  ")
	}
	o.w.WriteByte('"')
	o.w.WriteString(name)
	if o.indent {
		o.w.WriteString(`": `)
	} else {
		o.w.WriteString(`":`)
	}
}

// Field writes one field.
func (o *jsonObject) Field(name string, v any) {
	o.key(name)
	o.buf.Reset()
	if err := o.enc.Encode(v); err != nil {
		o.fail(err)
		return
	}
	o.w.Write(bytes.TrimSuffix(o.buf.Bytes(), []byte("\n")))
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
			enc := newElemEncoder(&buf, o.indent)
			for c := w; c < chunks; c += workers {
				var b []byte
				select {
				case b = <-free[w]:
				case <-quit:
					return
				}
				b, err := encodeChunk(b[:0], enc, &buf, o.indent, c*arrayChunk, min(n, (c+1)*arrayChunk), elem)
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
			o.fail(p.err)
			return
		}
		o.w.Write(p.b)
		free[c%workers] <- p.b
	}
	if o.indent {
		o.w.WriteString("\n  ")
	}
	o.w.WriteByte(']')
}

// arrayChunk is how many elements of an Array one goroutine encodes at a
// time.
const arrayChunk = 64

// encodeChunk appends elements lo to hi-1 of an Array to dst, as they go
// between its brackets, using enc (newElemEncoder's), which writes into
// buf: the chunk is encoded in one call into encoding/json, as an array,
// whose brackets are then dropped.
func encodeChunk(dst []byte, enc *json.Encoder, buf *bytes.Buffer, indent bool, lo, hi int, elem func(i int) any) ([]byte, error) {
	elems := make([]any, 0, hi-lo)
	for i := lo; i < hi; i++ {
		elems = append(elems, elem(i))
	}
	buf.Reset()
	if err := enc.Encode(elems); err != nil {
		return dst, err
	}
	closing := "]\n" // compact: [e1,e2]
	if indent {
		closing = "\n  ]\n" // [\n    e1,\n    e2\n  ]
	}
	if lo > 0 {
		dst = append(dst, ',')
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte(closing))[1:]...), nil
}

// Close ends the document and flushes it.
func (o *jsonObject) Close() error {
	if o.indent && o.fields > 0 {
		o.w.WriteByte('\n')
	}
	o.w.WriteString("}\n")
	if err := o.w.Flush(); err != nil {
		return err
	}
	return o.err
}
