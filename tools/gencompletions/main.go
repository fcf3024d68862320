// Command gencompletions writes leasectl's shell completion scripts into a
// directory; `go generate ./cmd` (or `make completions`) runs it.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasectl/leasectl/cmd"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gencompletions DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, shell := range cmd.Shells {
		var buf bytes.Buffer
		if err := cmd.GenerateCompletion(shell, &buf); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(dir, cmd.CompletionFile(shell)), buf.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
