package supervisor

import (
	"errors"
	"log/slog"
	"syscall"
)

// errNoCommands is why Command cannot run a program on Windows.
var errNoCommands = errors.New("a program cannot run under a lease on Windows: it needs process groups, signals and inherited sockets (run it on Linux, for example in a container, or use lease.Run in your own Go program)")

// Support refuses: see errNoCommands.
func Support() error { return errNoCommands }

func childAttr() *syscall.SysProcAttr        { return nil }
func killPID(int, syscall.Signal)            {}
func startTime(int) uint64                   { return 0 }
func (t *programTree) members() []proc       { return nil }
func (t *programTree) signal(syscall.Signal) {}
func becomeSubreaper(*slog.Logger) bool      { return false }
func reapOrphans(int) func()                 { return func() {} }

// ReapAsInit does nothing here: a PID namespace, whose PID 1 inherits every
// orphan, is Linux's (containers).
func ReapAsInit() (stop func()) { return func() {} }

// obituarySupport refuses: see errNoCommands.
func obituarySupport() error { return errNoCommands }

func obituaryAttr() *syscall.SysProcAttr { return nil }

func signalTrees(trees []*programTree, _ syscall.Signal) []int { return make([]int, len(trees)) }
