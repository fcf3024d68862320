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
}

// SystemStreams are the process's stdin, stdout and stderr.
func SystemStreams() *IOStreams {
	isTTY := func(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
	return &IOStreams{
		In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr,
		InTTY: isTTY(os.Stdin), OutTTY: isTTY(os.Stdout), ErrTTY: isTTY(os.Stderr),
	}
}
