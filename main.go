// Command leasectl diagnoses and runs leader-only workers that elect a leader
// with PostgreSQL session-level advisory locks.
package main

import (
	"os"

	"github.com/leasectl/leasectl/cmd"
)

func main() {
	os.Exit(cmd.Execute(os.Args[1:]))
}
