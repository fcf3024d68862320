package lease

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
)

// SearchWindow is how long after losing a working session a lease looks
// for a primary closely, instead of backing off to RetryInterval: an HA
// manager promotes a standby within seconds (Patroni's default ttl is
// 30 s), and every second of backoff then is a second nobody leads.
const SearchWindow = time.Minute

// The pace of the search. With several hosts in the DSN a lease stays
// connected to each (standbys accept connections) and asks every
// watchInterval whether it is still in recovery; a host that refuses is
// dialled again every redialInterval. With one host (a load balancer, a
// cloud endpoint) it reconnects every pollInterval.
const (
	watchInterval  = 25 * time.Millisecond
	redialInterval = 250 * time.Millisecond
	pollInterval   = 50 * time.Millisecond
)

// search waits until it is worth connecting again: with several hosts,
// until one of them is a primary (or until), which the next connections
// then try first; with one host, pollInterval. It reports false when ctx
// ended. It polls each host every 25 ms (a host that is down, every
// 250 ms), for at most SearchWindow after the loss.
func (r *runner) search(ctx context.Context, until time.Time) bool {
	hosts := hostConfigs(r.cfg.ConnConfig)
	if len(hosts) < 2 {
		jitter := time.Duration(rand.Int64N(int64(pollInterval / 2)))
		return sleep(ctx, pollInterval+jitter)
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	found := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, cfg := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if watchHost(wctx, cfg, r.cfg.HeartbeatTimeout) {
				once.Do(func() {
					r.primary = hostPort{cfg.Host, cfg.Port}
					close(found)
				})
			}
		}()
	}
	select {
	case <-found:
	case <-wctx.Done():
	}
	cancel()
	wg.Wait()
	return ctx.Err() == nil
}

// watchHost stays connected to one host and asks it whether it is in
// recovery every watchInterval, until it says no (true) or ctx ends.
func watchHost(ctx context.Context, cfg *pgx.ConnConfig, timeout time.Duration) bool {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := dbconn.Connect(cctx, cfg)
		cancel()
		if err != nil {
			if !sleep(ctx, redialInterval) {
				return false
			}
			continue
		}
		primary := pollRecovery(ctx, conn, timeout)
		cctx, cancel = context.WithTimeout(context.Background(), timeout)
		_ = conn.Close(cctx)
		cancel()
		if primary {
			return true
		}
	}
	return false
}

// pollRecovery asks conn every watchInterval whether its server is in
// recovery: true when it says no, false when ctx ends or the connection
// fails.
func pollRecovery(ctx context.Context, conn *pgx.Conn, timeout time.Duration) bool {
	for {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		var inRecovery bool
		err := conn.QueryRow(qctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
		cancel()
		switch {
		case err != nil:
			return false
		case !inRecovery:
			return true
		}
		if !sleep(ctx, watchInterval) {
			return false
		}
	}
}

// hostPort names one host of a DSN.
type hostPort struct {
	host string
	port uint16
}

// preferHost returns cfg with the attempts at host p moved ahead of the
// others, keeping their order otherwise; cfg itself when p is not one of
// its hosts or is first already. A connection with
// target_session_attrs=primary then reaches the primary a search found
// without first connecting to, and being turned away by, a standby listed
// before it: with four connections to open per replica, that halves the
// work of a fleet reconnecting at once.
func preferHost(cfg *pgx.ConnConfig, p hostPort) *pgx.ConnConfig {
	if p.host == "" || len(cfg.Fallbacks) == 0 || (cfg.Host == p.host && cfg.Port == p.port) {
		return cfg
	}
	all := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	var first, rest []*pgconn.FallbackConfig
	for _, fb := range all {
		if fb.Host == p.host && fb.Port == p.port {
			first = append(first, fb)
		} else {
			rest = append(rest, fb)
		}
	}
	if len(first) == 0 {
		return cfg
	}
	out := cfg.Copy()
	order := append(first, rest...)
	out.Host, out.Port, out.TLSConfig = order[0].Host, order[0].Port, order[0].TLSConfig
	out.Fallbacks = order[1:]
	return out
}

// hostConfigs returns a config per distinct host of cfg that connects to
// that host alone, whether it is a primary or a standby (no
// target_session_attrs), keeping the TLS fallbacks pgx made for it.
func hostConfigs(cfg *pgx.ConnConfig) []*pgx.ConnConfig {
	all := []*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}
	all = append(all, cfg.Fallbacks...)
	var order []hostPort
	byHost := map[hostPort][]*pgconn.FallbackConfig{}
	for _, fb := range all {
		hp := hostPort{fb.Host, fb.Port}
		if byHost[hp] == nil {
			order = append(order, hp)
		}
		byHost[hp] = append(byHost[hp], fb)
	}
	out := make([]*pgx.ConnConfig, 0, len(order))
	for _, hp := range order {
		c := cfg.Copy()
		variants := byHost[hp]
		c.Host, c.Port, c.TLSConfig = variants[0].Host, variants[0].Port, variants[0].TLSConfig
		c.Fallbacks = variants[1:]
		c.ValidateConnect = nil
		if c.RuntimeParams == nil {
			c.RuntimeParams = map[string]string{}
		}
		if c.RuntimeParams["application_name"] == "" {
			c.RuntimeParams["application_name"] = "leasectl lease: waiting for a primary"
		}
		out = append(out, c)
	}
	return out
}
