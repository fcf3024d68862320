// Package supervisor runs a program as the work of a lease (package
// lease): the program starts only while the lease is held, and it, with
// everything it started, is gone before the lease can pass on.
//
// [Command] starts the program in its own process group with the lease in
// its environment, hands it copies of the lease and stop fence sessions'
// sockets (so that the server keeps the key and its fence while any of the
// program's processes live, even if this process is SIGKILLed), and stops
// its whole tree when the lease ends: the process group, descendants that
// carry its id in their environment, and, as a child subreaper on Linux,
// daemons that double-forked away. [Run] is lease.Run with a
// [RestartPolicy]; [StopSignal] passes the signal that stops this process
// on to the program; [ReapAsInit] reaps orphans when this process is a
// container's PID 1. Together they are `leasectl run`.
//
// Being a subreaper, reaping and the set of programs os/exec waits for are
// properties of the whole process, so this package keeps them in package
// state: use it in a process that starts no other programs.
package supervisor
