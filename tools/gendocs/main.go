// Command gendocs writes leasectl's command reference: a markdown page per
// command into MDDIR and a man page per command into MANDIR (see package
// refdocs). `go generate ./cmd` (or `make docs`) runs it.
package main

import (
	"fmt"
	"os"

	"github.com/leasectl/leasectl/test/refdocs"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gendocs MDDIR MANDIR")
		os.Exit(2)
	}
	pages, err := refdocs.Pages()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for kind, dir := range map[string]string{"markdown": os.Args[1], "man": os.Args[2]} {
		if err := refdocs.Write(dir, kind, pages[kind]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
