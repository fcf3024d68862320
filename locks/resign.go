package locks

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/errkind"
)

// A graceful handover: `leasectl failover` asks the leader to step down
// instead of terminating its session. The leader's lease session LISTENs on
// the key's resign channel; failover LISTENs on the key's resigned channel
// and sends a ResignRequest naming the holder's backend pid. The leader
// answers at once with a ResignAck on the resigned channel, stops its work,
// and releases the key, and a stand-by in the lock queue takes over. A
// leader that does not answer (an older leasectl, a hung process) is
// terminated as before.

// ResignChannel is the channel a lease session holding key LISTENs on for
// requests to step down.
func ResignChannel(key int64) string { return "leasectl_resign_" + strconv.FormatInt(key, 10) }

// ResignedChannel is the channel on which a leader of key answers a
// request to step down.
func ResignedChannel(key int64) string { return "leasectl_resigned_" + strconv.FormatInt(key, 10) }

// ResignRequest asks the lease session of backend PID to step down. ID
// pairs the answer with the request.
type ResignRequest struct {
	PID uint32 `json:"pid"`
	ID  string `json:"id"`
	// Drain asks a group run (run --procfile) to step down from every role
	// it leads and to stop taking roles until it restarts: a node drain
	// (leasectl failover --replica). A single-role lease treats it as a
	// plain request.
	Drain bool `json:"drain,omitempty"`
}

// ResignAck is a leader's answer to a ResignRequest: it stops its work
// (taking up to StopTimeoutMS) and then releases the key.
type ResignAck struct {
	PID           uint32 `json:"pid"`
	ID            string `json:"id"`
	StopTimeoutMS int64  `json:"stop_timeout_ms"`
}

// ParseResignRequest decodes a notification payload on a resign channel.
func ParseResignRequest(payload string) (ResignRequest, error) {
	var r ResignRequest
	if err := json.Unmarshal([]byte(payload), &r); err != nil || r.PID == 0 {
		return r, fmt.Errorf("not a resign request: %q", payload)
	}
	return r, nil
}

// ParseResignAck decodes a notification payload on a resigned channel.
func ParseResignAck(payload string) (ResignAck, error) {
	var a ResignAck
	if err := json.Unmarshal([]byte(payload), &a); err != nil || a.PID == 0 {
		return a, fmt.Errorf("not a resign answer: %q", payload)
	}
	return a, nil
}

// Listen makes conn's session LISTEN on channel.
func Listen(ctx context.Context, conn *pgx.Conn, channel string) error {
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("listen on %s: %w", channel, err)
	}
	return nil
}

// ListenAll makes conn's session LISTEN on every channel, in one round
// trip.
func ListenAll(ctx context.Context, conn *pgx.Conn, channels []string) error {
	b := &pgx.Batch{}
	for _, ch := range channels {
		b.Queue("LISTEN " + pgx.Identifier{ch}.Sanitize())
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("listen on %d channel(s): %w", len(channels), err)
	}
	return nil
}

// Notify sends v, encoded as JSON, on channel (pg_notify; delivered when
// the statement's transaction commits, at once outside a transaction).
func Notify(ctx context.Context, q Querier, channel string, v any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return err
	}
	rows, err := q.Query(ctx, "SELECT pg_notify($1, $2)", channel, string(payload))
	if err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	return nil
}

// ErrNoResignAnswer means the leader did not answer a request to step down
// in time: it runs a leasectl without graceful handover, or it is hung.
var ErrNoResignAnswer = errkind.New(errkind.CheckFailed, "the leader did not answer the request to step down")
