package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Switchover hands the primary role to the other node, as an operator
// would: Patroni's REST API POST /switchover on the current primary, which
// demotes it with a clean shutdown, promotes the other node and restarts
// the old primary as its replica. It first waits (up to a minute) for the
// other node to stream, as Patroni refuses a switchover to a replica it
// cannot trust. It returns once the new primary accepts writes, HAProxy's
// primary listener sends clients to it alone, and the old primary streams
// from it with HAProxy's replicas listener sending clients to it alone; then
// l.Primary and l.Standby name the new roles, in lab.json too.
func (l *Lab) Switchover(ctx context.Context) (*HAChange, error) {
	from, to, err := l.haPair(ctx)
	if err != nil {
		return nil, err
	}
	l.Logf("switchover from %s to %s", from.Name, to.Name)
	begin := time.Now()
	body, _ := json.Marshal(map[string]string{"leader": from.Name, "candidate": to.Name})
	code, answer, err := httpDo(ctx, http.MethodPost, from.RESTPort, "/switchover", body, 90*time.Second)
	if err != nil {
		return nil, fmt.Errorf("ask patroni %s for a switchover: %w\n%s", from.Name, err, tail(from.PatroniLog, 10))
	}
	if code != 200 {
		return nil, fmt.Errorf("patroni %s refused the switchover to %s (%d %s): see its log\n%s", from.Name, to.Name, code, strings.TrimSpace(string(answer)), tail(from.PatroniLog, 10))
	}
	ch, err := l.followPromotion(ctx, from, to, begin, 60*time.Second)
	if err != nil {
		return ch, err
	}
	if err := l.waitStreaming(ctx, to, from, 90*time.Second); err != nil {
		return ch, fmt.Errorf("after the switchover: %w", err)
	}
	if err := l.waitReplicaRouted(ctx, from, 30*time.Second); err != nil {
		return ch, fmt.Errorf("after the switchover: %w", err)
	}
	ch.Rejoined = time.Since(begin)
	l.Logf("switchover done: %s writable after %v, routed after %v, %s streaming after %v", to.Name, ch.Writable.Round(time.Millisecond), ch.Routed.Round(time.Millisecond), from.Name, ch.Rejoined.Round(time.Millisecond))
	return ch, nil
}

// KillPrimary kills the node that is the primary now, as a machine dies:
// SIGKILL to its Patroni, then to its PostgreSQL postmaster and every
// child. It first waits (up to a minute) for the other node to stream, as
// otherwise nothing could take over. It returns once the other node holds
// the leader key (Patroni waits for the dead node's key to expire: about
// TTL), accepts writes, and HAProxy's primary listener sends clients to it
// alone; then l.Primary and l.Standby name the new roles, in lab.json too,
// and l.Standby is the dead node. The dead node stays dead until
// ReviveNode.
func (l *Lab) KillPrimary(ctx context.Context) (*HAChange, error) {
	from, to, err := l.haPair(ctx)
	if err != nil {
		return nil, err
	}
	l.Logf("kill %s (patroni and postgres, SIGKILL)", from.Name)
	begin := time.Now()
	if err := l.KillNode(from.Name); err != nil {
		return nil, err
	}
	ch, err := l.followPromotion(ctx, from, to, begin, l.HA.TTL+90*time.Second)
	if err != nil {
		return ch, err
	}
	l.Logf("%s took over: writable after %v, routed after %v", to.Name, ch.Writable.Round(time.Millisecond), ch.Routed.Round(time.Millisecond))
	return ch, nil
}

// KillNode kills the HA node called name, whatever its role, with SIGKILL:
// first its Patroni, so that nothing restarts its PostgreSQL, then every
// process of its PostgreSQL. It returns once they are gone. The node stays
// dead until ReviveNode.
func (l *Lab) KillNode(name string) error {
	if l.HA == nil {
		return ErrNoHA
	}
	n := l.HANode(name)
	if n == nil {
		return fmt.Errorf("no HA node %q in this lab: use node1 or node2", name)
	}
	var errs []error
	if pid := PatroniPID(n); pid > 0 {
		errs = append(errs, StopGroup(pid, syscall.SIGKILL, 5*time.Second))
	}
	// The postmaster first, so that it forks nothing more; then its
	// children, which all work in the data directory.
	if pid := ServerPID(&n.Server); pid > 0 {
		errs = append(errs, killAndWait(pid, syscall.SIGKILL, 5*time.Second))
	}
	for round := 0; round < 3; round++ {
		pids := ProcessesUsing(filepath.Dir(n.ConfigFile))
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			errs = append(errs, killAndWait(pid, syscall.SIGKILL, 5*time.Second))
		}
	}
	if left := ProcessesUsing(filepath.Dir(n.ConfigFile)); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes of %s survived SIGKILL: %v", n.Name, left))
	}
	return errors.Join(errs...)
}

// ReviveNode starts the Patroni of a dead node again (after KillPrimary or
// KillNode) and returns once the node runs again, with HAProxy's listener
// for its role sending clients to it: as a replica streaming from the
// primary (Patroni rewinds it with pg_rewind first when it had diverged, or
// clones it afresh when that fails), or as the primary itself when no
// other node holds the leader key. It reports how long that took.
func (l *Lab) ReviveNode(ctx context.Context, name string) (time.Duration, error) {
	if l.HA == nil {
		return 0, ErrNoHA
	}
	n := l.HANode(name)
	if n == nil {
		return 0, fmt.Errorf("no HA node %q in this lab: use node1 or node2", name)
	}
	if pid := PatroniPID(n); pid > 0 {
		return 0, fmt.Errorf("%s's patroni runs already (pid %d): there is nothing to revive", n.Name, pid)
	}
	if left := ProcessesUsing(filepath.Dir(n.ConfigFile)); len(left) > 0 {
		return 0, fmt.Errorf("%s's patroni is dead but processes of its PostgreSQL run (%v): kill them first (lab.KillNode)", n.Name, left)
	}
	l.Logf("revive %s", n.Name)
	begin := time.Now()
	if err := l.startPatroni(n); err != nil {
		return 0, err
	}
	other := l.otherNode(n)
	var primary bool
	back := func() (bool, error) {
		if PatroniPID(n) == 0 {
			return false, stopPolling{fmt.Errorf("patroni %s exited", n.Name)}
		}
		p, err := l.HAPrimary(ctx)
		if err != nil {
			return false, err
		}
		if p.Name == n.Name {
			primary = true
			return true, l.acceptsWrite(ctx, n)
		}
		return l.streams(ctx, other, n)
	}
	if err := poll(ctx, 3*time.Minute, back); err != nil {
		return 0, fmt.Errorf("%s did not come back as a streaming replica or as the primary: %w\n%s%s", n.Name, err, LogProblems(n.PatroniLog, 5), tail(n.PatroniLog, 15))
	}
	if primary {
		if err := l.waitRouted(ctx, n, 30*time.Second); err != nil {
			return 0, err
		}
	} else if err := l.waitReplicaRouted(ctx, n, 30*time.Second); err != nil {
		return 0, err
	}
	took := time.Since(begin)
	l.Logf("%s is back after %v", n.Name, took.Round(time.Millisecond))
	return took, nil
}

// haPair returns the primary now and the other node, once the other node
// streams from the primary.
func (l *Lab) haPair(ctx context.Context) (from, to *HANode, err error) {
	if l.HA == nil {
		return nil, nil, ErrNoHA
	}
	if from, err = l.HAPrimary(ctx); err != nil {
		return nil, nil, err
	}
	to = l.otherNode(from)
	if PatroniPID(to) == 0 {
		return nil, nil, fmt.Errorf("%s is dead, so it cannot take over from %s: revive it first (leasectl lab revive %s)", to.Name, from.Name, to.Name)
	}
	if err := l.waitStreaming(ctx, from, to, time.Minute); err != nil {
		return nil, nil, err
	}
	return from, to, nil
}

// followPromotion waits until to is the primary and accepts writes, and
// until HAProxy's primary listener sends clients to it alone; then it
// records the new roles in l.Primary and l.Standby.
func (l *Lab) followPromotion(ctx context.Context, from, to *HANode, begin time.Time, limit time.Duration) (*HAChange, error) {
	ch := &HAChange{From: from.Name, To: to.Name}
	promoted := func() (bool, error) {
		if PatroniPID(to) == 0 {
			return false, stopPolling{fmt.Errorf("patroni %s exited", to.Name)}
		}
		code, _, err := httpGet(ctx, to.RESTPort, "/primary", 2*time.Second)
		if err != nil || code != 200 {
			return false, err
		}
		return true, l.acceptsWrite(ctx, to)
	}
	if err := poll(ctx, limit, promoted); err != nil {
		return ch, fmt.Errorf("%s did not become a writable primary within %v: %w\n%s%s", to.Name, limit, err, LogProblems(to.PatroniLog, 5), tail(to.PatroniLog, 15))
	}
	ch.Writable = time.Since(begin)
	l.Primary = to.Server
	old := from.Server
	l.Standby = &old
	if err := l.save(); err != nil {
		return ch, err
	}
	if err := l.waitRouted(ctx, to, 30*time.Second); err != nil {
		return ch, err
	}
	ch.Routed = time.Since(begin)
	return ch, nil
}

// waitWritable waits until n is the primary and accepts a write.
func (l *Lab) waitWritable(ctx context.Context, n *HANode, limit time.Duration) error {
	ready := func() (bool, error) {
		if PatroniPID(n) == 0 {
			return false, stopPolling{fmt.Errorf("patroni %s exited", n.Name)}
		}
		code, _, err := httpGet(ctx, n.RESTPort, "/primary", 2*time.Second)
		if err != nil || code != 200 {
			return false, err
		}
		return true, l.acceptsWrite(ctx, n)
	}
	if err := poll(ctx, limit, ready); err != nil {
		return fmt.Errorf("patroni %s did not bring up a writable primary on port %d: %w\n%s%s", n.Name, n.Port, err, LogProblems(n.PatroniLog, 5), tail(n.PatroniLog, 15))
	}
	return nil
}

// waitStreaming waits until replica streams from primary: pg_stat_replication
// on the primary shows it (Patroni names each replica's connection after its
// node) in state streaming, and its Patroni deems it a running replica (GET
// /replica answers 200). Neither implies the other: Patroni answers 200 as
// soon as the replica's PostgreSQL runs, before it can stream (its slot on
// the primary may not exist yet), and after a basebackup the replica
// streams a second before Patroni ends its bootstrap and answers 200.
func (l *Lab) waitStreaming(ctx context.Context, primary, replica *HANode, limit time.Duration) error {
	ready := func() (bool, error) {
		if PatroniPID(replica) == 0 {
			return false, stopPolling{fmt.Errorf("patroni %s is not running (revive it: leasectl lab revive %s)", replica.Name, replica.Name)}
		}
		if ok, err := l.streams(ctx, primary, replica); !ok {
			return false, err
		}
		code, _, err := httpGet(ctx, replica.RESTPort, "/replica", 2*time.Second)
		if err == nil && code != 200 {
			err = fmt.Errorf("patroni %s answers GET /replica with %d", replica.Name, code)
		}
		return err == nil, err
	}
	if err := poll(ctx, limit, ready); err != nil {
		return fmt.Errorf("%s does not stream from %s: %w\n%s%s", replica.Name, primary.Name, err, LogProblems(replica.PatroniLog, 5), tail(replica.PatroniLog, 15))
	}
	return nil
}

// streams reports whether replica streams from primary.
func (l *Lab) streams(ctx context.Context, primary, replica *HANode) (bool, error) {
	conn, err := l.connectPort(ctx, primary.Port)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", replica.Name).Scan(&n)
	if err != nil {
		return false, err
	}
	if n == 0 {
		return false, fmt.Errorf("pg_stat_replication on %s shows no streaming %s", primary.Name, replica.Name)
	}
	return true, nil
}

// acceptsWrite has n assign a transaction id, which a server in recovery
// refuses.
func (l *Lab) acceptsWrite(ctx context.Context, n *HANode) error {
	conn, err := l.connectPort(ctx, n.Port)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var xid string
	return conn.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid)
}

// serverBehind connects to port and returns the port of the server that
// answers and whether it is in recovery.
func (l *Lab) serverBehind(ctx context.Context, port int) (int, bool, error) {
	conn, err := l.connectPort(ctx, port)
	if err != nil {
		return 0, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var p int
	var rec bool
	err = conn.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&p, &rec)
	return p, rec, err
}

// connectPort opens a connection as the superuser to port, giving up after
// 3 s.
func (l *Lab) connectPort(ctx context.Context, port int) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(cctx, l.DSN(port, l.User, "postgres"))
}

// stopPolling ends a poll at once with its error.
type stopPolling struct{ err error }

func (s stopPolling) Error() string { return s.err.Error() }

// poll calls check every 50 ms until it reports true, ctx ends, limit
// passes or check returns a stopPolling; the error then carries what check
// said last.
func poll(ctx context.Context, limit time.Duration, check func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := check()
		if ok && err == nil {
			return nil
		}
		var stop stopPolling
		if errors.As(err, &stop) {
			return stop.err
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("timed out after %v; last: %w", limit, last)
			}
			return fmt.Errorf("timed out after %v", limit)
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w; last: %v", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
