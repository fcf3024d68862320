package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// confirm asks question on w and reads the answer from the terminal: only
// "y" or "yes" is a yes; end of input is a no.
func confirm(app *App, w io.Writer, question string) (bool, error) {
	if _, err := fmt.Fprintf(w, "%s [y/N] ", question); err != nil {
		return false, err
	}
	line, err := bufio.NewReader(app.IO.In).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(w)
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
