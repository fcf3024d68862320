package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/leasectl/leasectl/internal/errkind"
)

// errPromptInterrupted ends a command interrupted (Ctrl-C) at its
// confirmation prompt: exit 130, nothing done.
var errPromptInterrupted = errkind.New(errkind.Interrupted, "interrupted at the prompt: nothing done")

// confirm asks question on w and reads the answer from the terminal: only
// "y" or "yes" is a yes; end of input is a no. When ctx ends first (Ctrl-C
// reaches leasectl as SIGINT, which cancels ctx), it returns
// errPromptInterrupted at once, and the line being typed is never read as
// an answer.
func confirm(ctx context.Context, app *App, w io.Writer, question string) (bool, error) {
	if _, err := fmt.Fprintf(w, "%s [y/N] ", question); err != nil {
		return false, err
	}
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(app.IO.In).ReadString('\n')
		got <- answer{line, err}
	}()
	var a answer
	select {
	case <-ctx.Done():
		fmt.Fprintln(w)
		return false, errPromptInterrupted
	case a = <-got:
	}
	if a.err != nil && a.line == "" {
		fmt.Fprintln(w)
		if errors.Is(a.err, io.EOF) {
			return false, nil
		}
		return false, a.err
	}
	switch strings.ToLower(strings.TrimSpace(a.line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
