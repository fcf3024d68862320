package cmd

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
)

type arrayElem struct {
	I    int      `json:"i"`
	Name string   `json:"name"`
	Tags []string `json:"tags"`
	F    float64  `json:"f"`
}

func arrayElemOf(i int) arrayElem {
	return arrayElem{I: i, Name: fmt.Sprintf(`e"%d\,{[:]}`, i), Tags: make([]string, i%3), F: float64(i) / 3}
}

// TestJSONArrayInOrder: an Array encoded by several goroutines is the
// document writeJSON writes for the same fields, element for element and
// in order, at every size around the chunk's, compact and indented.
func TestJSONArrayInOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // several workers on any machine
	for _, indent := range []bool{false, true} {
		for _, n := range []int{0, 1, arrayChunk - 1, arrayChunk, arrayChunk + 1, 5*arrayChunk + 3, 3000} {
			elems := make([]arrayElem, n)
			for i := range elems {
				elems[i] = arrayElemOf(i)
			}
			var want, got bytes.Buffer
			if err := writeJSON(&want, struct {
				A     string         `json:"a"`
				Elems []arrayElem    `json:"elems"`
				M     map[string]any `json:"m"`
				Z     bool           `json:"z"`
			}{"x", elems, map[string]any{"k": []int{1, 2}, "e": map[string]int{}}, true}, indent); err != nil {
				t.Fatal(err)
			}
			o := newJSONObject(&got, indent)
			o.Field("a", "x")
			o.Array("elems", n, func(i int) any { return arrayElemOf(i) })
			o.Field("m", map[string]any{"k": []int{1, 2}, "e": map[string]int{}})
			o.Field("z", true)
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("indent %v, %d elements: the streamed document differs from writeJSON's:\n%s\nwant:\n%s", indent, n, head(got.String()), head(want.String()))
			}
			if lines := strings.Count(got.String(), "\n"); !indent && lines != 1 {
				t.Errorf("compact, %d elements: %d lines, want 1", n, lines)
			}
		}
	}
	// An object with no fields, as encoding/json writes one.
	for _, indent := range []bool{false, true} {
		var got bytes.Buffer
		if err := newJSONObject(&got, indent).Close(); err != nil || got.String() != "{}\n" {
			t.Errorf("indent %v: empty object %q, %v; want {}", indent, got.String(), err)
		}
	}
}

// TestJSONArrayError: an element that cannot be encoded ends the document
// with its error, wherever it is, and no goroutine is left waiting.
func TestJSONArrayError(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	before := runtime.NumGoroutine()
	for i, bad := range []int{0, arrayChunk + 5, 2999} {
		var got bytes.Buffer
		o := newJSONObject(&got, i%2 == 1)
		o.Array("elems", 3000, func(i int) any {
			e := arrayElemOf(i)
			if i == bad {
				e.F = math.NaN()
			}
			return e
		})
		err := o.Close()
		if err == nil || !strings.Contains(err.Error(), "NaN") {
			t.Errorf("element %d of 3000 is NaN: Close returned %v", bad, err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines before, %d 10s after", before, runtime.NumGoroutine())
		}
	}
}
