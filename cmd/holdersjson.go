package cmd

import (
	"slices"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/locks"
)

// The JSON pieces that several documents share (docs/json.md): a session
// holding or awaiting a key (who, failover, verify), and a failover
// (failover's document, and each clean_failover result of verify's).

type sessionJSON struct {
	PID             *int32        `json:"pid"`
	PreparedXact    *preparedJSON `json:"prepared_xact"`
	Mode            string        `json:"mode"`
	User            string        `json:"user"`
	ApplicationName string        `json:"application_name"`
	ClientAddr      *string       `json:"client_addr"`
	ClientPort      *int32        `json:"client_port"`
	BackendStart    *string       `json:"backend_start"`
	State           *string       `json:"state"`
	StateChange     *string       `json:"state_change"`
	IdleMS          *float64      `json:"idle_ms"`
	WaitStart       *string       `json:"wait_start"`
	WaitMS          *float64      `json:"wait_ms"`
	Stale           bool          `json:"stale"`
	Hidden          bool          `json:"hidden"`
	Gone            bool          `json:"gone"`
}

type preparedJSON struct {
	GID        string    `json:"gid"`
	PreparedAt time.Time `json:"prepared_at"`
	Owner      string    `json:"owner"`
}

// sessionJSONOf renders s as read at now; staleAfter 0 means no staleness
// threshold applies (stale is false). The rendering points into s, which
// it does not copy: who --all renders thousands.
func sessionJSONOf(s *locks.Session, now time.Time, staleAfter time.Duration) sessionJSON {
	j := sessionJSON{Mode: "exclusive", User: s.User, ApplicationName: s.Application,
		Stale: staleAfter > 0 && s.Stale(now, staleAfter), Hidden: s.Hidden, Gone: s.Gone}
	if s.Shared {
		j.Mode = "shared"
	}
	if s.Prepared != nil {
		j.PreparedXact = &preparedJSON{GID: s.Prepared.GID, PreparedAt: s.Prepared.PreparedAt, Owner: s.Prepared.Owner}
	} else {
		j.PID = &s.PID
	}
	if s.ClientAddr != "" {
		j.ClientAddr, j.ClientPort = &s.ClientAddr, &s.ClientPort
	}
	j.BackendStart, j.StateChange, j.WaitStart = timeText(s.BackendStart), timeText(s.StateChange), timeText(s.WaitStart)
	if s.State != "" {
		j.State = &s.State
	}
	if d, ok := s.Idle(now); ok {
		j.IdleMS = msPtr(d)
	}
	if d, ok := s.Waited(now); ok {
		j.WaitMS = msPtr(d)
	}
	return j
}

// timeText is t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds), or nil for the zero time. who --all renders three times
// per session: formatted here they cost a third of what encoding/json's
// call of MarshalJSON, and its check of the result, cost.
func timeText(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.Format(time.RFC3339Nano)
	return &s
}

// failoverJSON is one failover, in failover's output and in verify's
// clean_failover results.
type failoverJSON struct {
	Role          *string      `json:"role"`
	Key           string       `json:"key"`
	Path          string       `json:"path"`
	Resign        *resignJSON  `json:"resign"`
	OldHolder     sessionJSON  `json:"old_holder"`
	OldGone       bool         `json:"old_gone"`
	TerminateMS   *float64     `json:"terminate_ms"`
	TookOver      bool         `json:"took_over"`
	NewHolder     *sessionJSON `json:"new_holder"`
	TakeoverMS    *float64     `json:"takeover_ms"`
	TakeoverClock *string      `json:"takeover_clock"`
	// ReleasedBeforeSignal: the terminated holder had released the key in
	// the moment between the holder check and the signal.
	ReleasedBeforeSignal bool `json:"released_before_signal"`
}

// resignJSON is the request to step down.
type resignJSON struct {
	Answered    bool     `json:"answered"`
	AnswerMS    *float64 `json:"answer_ms"`
	Released    bool     `json:"released"`
	ReleaseMS   *float64 `json:"release_ms"`
	StopTimeout *float64 `json:"stop_timeout_ms"`
	Fallback    *string  `json:"fallback"`
}

// takeoverClock names the clock the takeover time was measured on.
func takeoverClock(tk *locks.Takeover) string {
	if tk.ByServerClock {
		return "server"
	}
	return "client"
}

func failoverJSONOf(res *locks.Failover) failoverJSON {
	t := res.Target
	j := failoverJSON{
		Key:       t.Locks.Key.String(),
		Path:      res.Path,
		OldHolder: sessionJSONOf(&t.Holder, t.Now, 0), // no staleness threshold applies
	}
	if t.Locks.Role != "" {
		j.Role = &t.Locks.Role
	}
	if rs := res.Resign; rs != nil {
		r := &resignJSON{Answered: rs.Answered, Released: rs.Released}
		if rs.Answered {
			ms, stop := millis(rs.AnswerTook), float64(rs.Ack.StopTimeoutMS)
			r.AnswerMS, r.StopTimeout = &ms, &stop
		}
		if rs.Released {
			ms := millis(rs.ReleaseTook)
			r.ReleaseMS = &ms
		}
		if rs.Fallback != "" {
			r.Fallback = &rs.Fallback
		}
		j.Resign = r
	}
	if term := res.Termination; term != nil {
		ms := millis(term.Took)
		j.OldGone, j.TerminateMS = term.Gone, &ms
	}
	if tk := res.Takeover; tk != nil {
		nh := sessionJSONOf(&tk.Holder, tk.Now, 0)
		ms, clock := millis(tk.After), takeoverClock(tk)
		j.TookOver, j.NewHolder, j.TakeoverMS, j.TakeoverClock = true, &nh, &ms, &clock
		j.ReleasedBeforeSignal = tk.BeforeSignal
	}
	return j
}

// replicaJSON is one replica that serves roles (who --replicas, failover
// --replica), by its lease session.
type replicaJSON struct {
	ApplicationName string        `json:"application_name"`
	Host            *string       `json:"host"`
	Kind            string        `json:"kind"`
	BackendPID      int32         `json:"backend_pid"`
	FencePID        *int32        `json:"fence_pid"`
	User            string        `json:"user"`
	ClientAddr      *string       `json:"client_addr"`
	ClientPort      *int32        `json:"client_port"`
	BackendStart    *string       `json:"backend_start"`
	LeadCount       int           `json:"lead_count"`
	WaitCount       int           `json:"wait_count"`
	Leads           []roleRefJSON `json:"leads"`
	Waits           []roleRefJSON `json:"waits"`
	Drained         bool          `json:"drained"`
	Hidden          bool          `json:"hidden"`
}

func replicaJSONOf(r locks.Replica) replicaJSON {
	s := r.Session
	j := replicaJSON{ApplicationName: s.Application, Kind: replicaKind(r), BackendPID: s.PID, User: s.User,
		BackendStart: timeText(s.BackendStart), LeadCount: len(r.Leads), WaitCount: len(r.Waits),
		Leads: make([]roleRefJSON, 0, len(r.Leads)), Waits: make([]roleRefJSON, 0, len(r.Waits)), Drained: r.Drained, Hidden: s.Hidden}
	if h := r.Host(); strings.Contains(s.Application, "@") {
		j.Host = &h
	}
	if r.Fence != nil {
		j.FencePID = &r.Fence.PID
	}
	if s.ClientAddr != "" {
		j.ClientAddr, j.ClientPort = &s.ClientAddr, &s.ClientPort
	}
	for _, l := range r.Leads {
		j.Leads = append(j.Leads, roleRefJSONOf(l))
	}
	for _, w := range r.Waits {
		j.Waits = append(j.Waits, roleRefJSONOf(w))
	}
	return j
}

// anyHiddenReplica reports whether the server withheld some replica's
// session details.
func anyHiddenReplica(rs []locks.Replica) bool {
	return slices.ContainsFunc(rs, func(r locks.Replica) bool { return r.Session.Hidden })
}

// replicasDocJSON is the documented schema of `leasectl who --replicas -o
// json` (docs/json.md).
type replicasDocJSON struct {
	docHeader
	Server      dbconn.ServerInfo `json:"server"`
	Now         time.Time         `json:"now"`
	Replicas    []replicaJSON     `json:"replicas"`
	Hidden      bool              `json:"hidden"`
	RevealGrant *string           `json:"reveal_grant"`
}

func replicasJSONOf(v *whoView) replicasDocJSON {
	doc := replicasDocJSON{docHeader: header(true), Server: v.server, Now: v.now, Replicas: make([]replicaJSON, 0, len(v.replicas))}
	for _, r := range v.replicas {
		doc.Replicas = append(doc.Replicas, replicaJSONOf(r))
	}
	if anyHiddenReplica(v.replicas) {
		grant := locks.RevealGrant(v.server.User)
		doc.Hidden, doc.RevealGrant = true, &grant
	}
	return doc
}
