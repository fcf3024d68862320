//go:build unix

// Command witness is the child program of leasectl's tests and benchmarks:
// it reports to a unix socket when it starts, when it is signalled and when
// it finds another witness still running (a non-blocking flock on a shared
// file), so that a test can prove that at most one child runs at a time.
// Like `leasectl run`, whose program it plays, it needs Unix (flock,
// sessions); on Windows it is not built.
//
//	witness [-lock FILE] [-notify SOCKET] [-exit N] [-ignore-term] [-stop-delay D] [-daemon setsid|doublefork]
//
// With -daemon it first starts a daemon that holds the lock too (the lock
// file's descriptor is inherited), as a program that leaves a daemon
// behind does: setsid starts it in a session of its own; doublefork starts
// it from a child that exits at once, with an empty environment, so that
// it is orphaned and carries nothing of its origin. While the daemon lives,
// the next witness finds the lock held.
//
// Without -exit it runs until SIGTERM or SIGINT, then exits 0 (with
// -ignore-term it keeps running and must be killed; with -stop-delay it
// takes D to stop, like a program that drains its work, and reports "exit"
// just before it exits). It exits 97 when the lock is taken.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/lease"
	"github.com/leasectl/leasectl/test/leasetest"
)

func main() {
	lock := flag.String("lock", "", "take a non-blocking flock on this file; report an overlap and exit 97 if it is held")
	notify := flag.String("notify", "", "unix socket to report events to")
	exit := flag.Int("exit", -1, "exit with this status right after starting")
	ignoreTerm := flag.Bool("ignore-term", false, "report SIGTERM and SIGINT but keep running")
	stopDelay := flag.Duration("stop-delay", 0, "after SIGTERM or SIGINT, keep running (and holding the lock) this long, then report exit and exit 0")
	daemon := flag.String("daemon", "", "start a daemon that holds the lock too: setsid or doublefork")
	hold := flag.Bool("hold", false, "(the daemon) hold descriptor 3 until killed")
	spawn := flag.Bool("spawn", false, "(the double fork's middle process) start the daemon and exit")
	write := flag.String("write", "", "every 100 ms, write a row into chaos_writes on this DSN in a transaction fenced with LEASECTL_FENCE_TOKEN; report refusals")
	writeHold := flag.Duration("write-hold", 0, "with -write: hold the first transaction open this long after its fence check, before it writes")
	flag.Parse()
	switch {
	case *hold:
		for { // descriptor 3 holds the lock until this process dies
			time.Sleep(time.Hour)
		}
	case *spawn:
		if err := startDaemon(os.NewFile(3, "lock"), "-hold", []string{}); err != nil {
			fmt.Fprintln(os.Stderr, "witness:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}

	// Listen for signals before reporting the start, so that none is missed.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	var out *json.Encoder
	if *notify != "" {
		if c, err := net.Dial("unix", *notify); err == nil {
			out = json.NewEncoder(c)
		} else {
			fmt.Fprintln(os.Stderr, "witness:", err)
		}
	}
	var reportMu sync.Mutex // the writer reports from a goroutine of its own
	report := func(kind, detail string) {
		reportMu.Lock()
		defer reportMu.Unlock()
		ev := leasetest.Event{
			Kind: kind, Detail: detail, PID: os.Getpid(), PPID: os.Getppid(),
			BackendPID: os.Getenv("LEASECTL_BACKEND_PID"), Role: os.Getenv("LEASECTL_ROLE"), Key: os.Getenv("LEASECTL_KEY"),
			LeaseFD: fdKind("LEASECTL_LEASE_FD", 3), FenceFD: fdKind("LEASECTL_FENCE_FD", 4),
			Epoch: os.Getenv("LEASECTL_EPOCH"), FenceToken: os.Getenv("LEASECTL_FENCE_TOKEN"),
		}
		if out != nil {
			_ = out.Encode(ev)
		}
	}

	if *lock != "" {
		f, err := os.OpenFile(*lock, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			report(leasetest.Failed, err.Error())
			os.Exit(96)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			report(leasetest.Overlap, err.Error())
			fmt.Fprintln(os.Stderr, "witness: another witness holds the lock:", err)
			os.Exit(97)
		}
		// Held until this process exits.
		switch *daemon {
		case "":
		case "setsid":
			err = startDaemon(f, "-hold", os.Environ())
		case "doublefork":
			err = startDaemon(f, "-spawn", os.Environ())
		default:
			err = fmt.Errorf("unknown -daemon %q", *daemon)
		}
		if err != nil {
			report(leasetest.Failed, err.Error())
			os.Exit(96)
		}
	}
	report(leasetest.Start, "")
	if *exit >= 0 {
		os.Exit(*exit)
	}
	if *write != "" {
		go writeLoop(*write, *writeHold, report)
	}
	for s := range sigs {
		report(leasetest.Term, s.String())
		if *ignoreTerm {
			continue
		}
		if *stopDelay > 0 {
			time.Sleep(*stopDelay)
			report(leasetest.Exit, "")
		}
		os.Exit(0)
	}
}

// fdKind describes descriptor fd, which leasectl run passes and names in
// the environment variable env.
func fdKind(env string, fd int) string {
	if os.Getenv(env) != strconv.Itoa(fd) {
		return ""
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "error: " + err.Error()
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFSOCK {
		return "socket"
	}
	return fmt.Sprintf("mode %o", st.Mode)
}

// startDaemon runs this program with flag in a session of its own, with
// lock as its descriptor 3 and env as its environment, and does not wait
// for it.
func startDaemon(lock *os.File, flag string, env []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, flag)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{lock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	return cmd.Process.Release()
}

// writeLoop writes a row every 100 ms into chaos_writes on dsn, each in a
// transaction that checks the term's fencing token first; the first one
// holds its transaction open for hold after the check. It reports each
// refusal (lease.StaleTermError) and each other failure.
func writeLoop(dsn string, hold time.Duration, report func(kind, detail string)) {
	ctx := context.Background()
	token := os.Getenv("LEASECTL_FENCE_TOKEN")
	cfg, err := dbconn.Parse(dsn, 5*time.Second)
	if err != nil {
		report(leasetest.Failed, err.Error())
		return
	}
	var conn *pgx.Conn
	for n := 0; ; n++ {
		if conn == nil || conn.IsClosed() {
			if conn, err = dbconn.Connect(ctx, cfg); err != nil {
				report(leasetest.WriteFail, err.Error())
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			epoch, err := lease.Fence(ctx, tx, token)
			if err != nil {
				return err
			}
			if n == 0 && hold > 0 {
				time.Sleep(hold)
			}
			_, err = tx.Exec(ctx, "INSERT INTO chaos_writes (epoch, pid) VALUES ($1, $2)", epoch, os.Getpid())
			return err
		})
		switch {
		case errors.As(err, new(*lease.StaleTermError)):
			report(leasetest.Refused, err.Error())
		case err != nil:
			report(leasetest.WriteFail, err.Error())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
