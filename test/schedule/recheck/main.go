// Command recheck runs the schedule's checker again on a history that a
// run wrote (make chaos-schedule writes one; go test ./test/schedule
// -args -history FILE too, with the replicas' logs beside it in
// FILE.logs), and prints its report, last line and all:
//
//	go run ./test/schedule/recheck FILE
//
// It exits 1 when the history broke a promise, 2 when FILE cannot be read.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/leasectl/leasectl/test/schedule"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: recheck HISTORY.json (written by a run of the schedule with -history)")
		os.Exit(2)
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "recheck: %v\n", err)
		os.Exit(2)
	}
	var h schedule.History
	if err := json.Unmarshal(b, &h); err != nil {
		fmt.Fprintf(os.Stderr, "recheck: %s is not a history of the schedule: %v\n", os.Args[1], err)
		os.Exit(2)
	}
	v := schedule.Check(h)
	if err := v.Report(os.Stdout, h); err != nil {
		fmt.Fprintf(os.Stderr, "recheck: %v\n", err)
		os.Exit(2)
	}
	if !v.OK() {
		os.Exit(1)
	}
}
