package cmd

import (
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams are the standard streams of one invocation, with whether each is
// a terminal. Tests build them from buffers and set the TTY flags by hand.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	InTTY  bool
	OutTTY bool
	ErrTTY bool

	// Width is the terminal's width in columns when stdout is one (0 when
	// it cannot be read), else 0; see App.Width. Tests set it to fit
	// output to a width without a terminal.
	Width int
	// TermWidth, when set, reads the terminal's width now, so that output
	// drawn again and again (who --watch) follows a resized window; 0 when
	// it cannot be read.
	TermWidth func() int
}

// SystemStreams are the process's stdin, stdout and stderr.
func SystemStreams() *IOStreams { return fileStreams(os.Stdin, os.Stdout, os.Stderr) }

// fileStreams are streams on files, with whether each is a terminal and,
// when stdout is one, its width.
func fileStreams(in, out, errOut *os.File) *IOStreams {
	isTTY := func(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
	s := &IOStreams{
		In: in, Out: out, ErrOut: errOut,
		InTTY: isTTY(in), OutTTY: isTTY(out), ErrTTY: isTTY(errOut),
	}
	if s.OutTTY {
		s.TermWidth = func() int {
			if w, _, err := term.GetSize(int(out.Fd())); err == nil && w > 0 {
				return w
			}
			return 0
		}
		s.Width = s.TermWidth()
	}
	return s
}
