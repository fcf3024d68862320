package lab

// ProcessesUsing returns the pids of processes whose working directory or
// command line lies in dir. On Windows the lab starts no process (Start
// refuses: see Support), and it reports none.
func ProcessesUsing(string) []int { return nil }
