// Package leasehttp serves the state of a lease (package lease), or of the
// leases of many roles in one process, over HTTP: Prometheus metrics at
// /metrics, and the health checks /healthz and /readyz that Kubernetes
// probes ask. It is what `leasectl run --metrics-addr` serves, for any
// program that holds a lease with lease.Run, supervisor.Run or
// supervisor.Command.
//
// Wire a [Monitor] into the lease's hooks, and wrap the lease's log
// handler with [Monitor.LogHandler]:
//
//	m := leasehttp.New(cfg.Role, cfg.Key, leasehttp.HealthWindow(cfg, grace))
//	cfg.Logger = slog.New(m.LogHandler(slog.NewTextHandler(os.Stderr, nil)))
//	cfg.OnStateChange = m.OnStateChange
//	cfg.OnHeartbeat = m.OnHeartbeat
//	stop, err := leasehttp.Serve("127.0.0.1:9464", m.Handler(), cfg.Logger)
//
// A process that runs the leases of many roles from one lease loop, over
// shared sessions (`leasectl run --procfile`), serves them all with a
// [Set]: a [Monitor] per role, added with [Set.Add], whose OnStart and
// OnRestart are wired to that role's program; the loop's hooks go to the
// Set, which routes each state change to its role by key and counts a
// heartbeat or a log record as a sign of life of every role:
//
//	s := leasehttp.NewSet(leasehttp.HealthWindow(cfg, grace))
//	for _, r := range roles {
//		m := s.Add(r.Role, r.Key)
//		r.Command.OnStart = m.OnStart
//		r.Restart.OnRestart = m.OnRestart
//	}
//	logger := slog.New(s.LogHandler(slog.NewTextHandler(os.Stderr, nil)))
//	// the loop's OnStateChange is s.OnStateChange, its OnHeartbeat s.OnHeartbeat
//	stop, err := leasehttp.Serve("127.0.0.1:9464", s.Handler(), logger)
//
// A Set's /metrics has each metric family once, with the series of every
// role; its /readyz is 200 when every role is ready, and its /healthz and
// /readyz bodies have a line per role with its state, such as
// `role="poller" key="1840000001" leading`.
//
// Liveness and readiness answer different questions. /readyz is the
// lease's state: ready while connected to a primary it may lead on,
// leading or standing by. /healthz is whether the lease loop still turns,
// whatever its state: a database outage makes every replica unready, and
// must not get them all restarted, while a loop that hangs should be.
//
// Two metrics follow the role's durable terms (see package lease).
// leasectl_lease_epoch is the epoch of the term this replica leads or last
// led; it is 0, not absent, before the replica has led a term, so that its
// series exists from the first scrape, and a leadership without a term
// record (lease.Change.Epoch 0) leaves it as it was.
// leasectl_lease_leaderless_seconds_total adds up lease.Change.Leaderless
// over the terms this replica began: how long the role had no term before
// each. Each gap is counted once, by the replica whose term ended it, so
// summed by role over the replicas it is the role's leaderless time. A gap
// counts only once the next term begins: a role without a leader right now
// shows in leasectl_lease_leader.
//
// The text exposition is written by hand: a handful of series does not
// justify a client library and its dependencies.
package leasehttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/lease"
)

// Monitor is one lease's metrics and health: the lease reports to it
// through its hooks, and its handlers answer /metrics, /healthz and
// /readyz. It is safe for concurrent use.
type Monitor struct {
	mu sync.Mutex
	// labels are the series' labels, `role="poller",key="1"`; ident is
	// the lease as /readyz of a [Set] names it, `role="poller" key="1"`.
	labels      string
	ident       string
	leading     bool
	transitions map[lease.State]int
	lastBeat    time.Time
	children    int
	// epoch is the epoch of the last term this replica began, 0 before
	// one; leaderless is the sum of the terms' Leaderless.
	epoch      int64
	leaderless time.Duration
	// state is the lease's current state, "" before the first one.
	state lease.State
	// restartIn is the wait of a restart policy between a run that
	// stopped and the next one (see [Monitor.OnRestart]); 0 when no
	// restart is pending.
	restartIn time.Duration
	// lastActivity is the last sign of life of the lease loop; staleAfter
	// is how old it may get before /healthz fails.
	lastActivity time.Time
	staleAfter   time.Duration
	now          func() time.Time
}

// New returns the metrics of the lease of role and key (an empty role is
// "key N", as the lease names itself). window is how long the lease loop
// may show no sign of life before /healthz fails (see [HealthWindow]);
// zero means the window of a lease with the default settings.
func New(role string, key int64, window time.Duration) *Monitor {
	role = lease.Config{Role: role, Key: key}.Name()
	if window <= 0 {
		window = HealthWindow(lease.Config{}, 0)
	}
	m := &Monitor{
		labels:      fmt.Sprintf(`role="%s",key="%d"`, escapeLabel(role), key),
		ident:       fmt.Sprintf(`role="%s" key="%d"`, escapeLabel(role), key),
		transitions: map[lease.State]int{},
		staleAfter:  window,
		now:         time.Now,
	}
	m.lastActivity = m.now()
	return m
}

// HealthWindow is how long the lease loop of cfg may show no sign of life
// (a state change, a heartbeat, a log record) before /healthz reports it
// stuck: three heartbeat intervals and a heartbeat's time limit (a
// stand-by's wait and a leader's heartbeat each end within one interval),
// plus the longest quiet stretches a healthy loop has: a retry wait, the
// time work takes to stop (stop; a program's Grace), and the minute-long
// search for a new primary after a lost session (lease.SearchWindow).
// Zero durations in cfg, and a zero stop, mean the lease's defaults.
func HealthWindow(cfg lease.Config, stop time.Duration) time.Duration {
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	interval := or(cfg.HeartbeatInterval, lease.DefaultHeartbeatInterval)
	timeout := or(cfg.HeartbeatTimeout, lease.DefaultHeartbeatTimeout)
	retry := or(cfg.RetryInterval, lease.DefaultRetryInterval)
	stop = or(stop, or(cfg.StopTimeout, lease.DefaultStopTimeout))
	w := 3*interval + timeout + retry + stop
	return max(w, lease.SearchWindow+timeout)
}

// Mark records a sign of life of the lease loop. The hooks mark too; so
// does every record that passes the handler of [Monitor.LogHandler]: while
// the database is down, the lease's retries only log.
func (m *Monitor) Mark() {
	m.mu.Lock()
	m.lastActivity = m.now()
	m.mu.Unlock()
}

// OnStateChange records a state change; it is a lease.Config.OnStateChange.
// A change to Leading that began a term (Epoch > 0) sets the epoch and adds
// its Leaderless to the leaderless time.
func (m *Monitor) OnStateChange(c lease.Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.leading = c.To == lease.Leading
	m.transitions[c.To]++
	if m.leading && c.Epoch > 0 {
		m.epoch = c.Epoch
		m.leaderless += max(c.Leaderless, 0)
	}
	m.state = c.To
	m.restartIn = 0
	m.lastActivity = m.now()
}

// OnRestart records that a restart policy will run the lease again after
// delay: the Stopped state that ended the last run is then not the end of
// the process, and /healthz stays 200 through the wait (its window grows
// by delay) while /readyz says "restarting". It fits
// supervisor.RestartPolicy.OnRestart.
func (m *Monitor) OnRestart(_ error, delay time.Duration) {
	m.mu.Lock()
	m.restartIn = max(delay, time.Nanosecond)
	m.lastActivity = m.now()
	m.mu.Unlock()
}

// OnHeartbeat records a round trip that proved the lease session alive; it
// is a lease.Config.OnHeartbeat.
func (m *Monitor) OnHeartbeat(at time.Time) {
	m.mu.Lock()
	m.lastBeat = at
	m.lastActivity = m.now()
	m.mu.Unlock()
}

// OnStart counts a start of the program; it is a supervisor.Command.OnStart.
func (m *Monitor) OnStart(int) {
	m.mu.Lock()
	m.children++
	m.mu.Unlock()
}

// LogHandler returns a handler that passes every record on to h and marks
// a sign of life for each (see [Monitor.Mark]). Give the lease a logger
// with it.
func (m *Monitor) LogHandler(h slog.Handler) slog.Handler {
	return &activityHandler{Handler: h, mark: m.Mark}
}

// Handler serves the metrics at /metrics and the health checks at
// /healthz and /readyz.
func (m *Monitor) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", m.ServeMetrics)
	mux.HandleFunc("/healthz", m.ServeHealth)
	mux.HandleFunc("/readyz", m.ServeReady)
	return mux
}

// ServeHealth answers /healthz: 200 while the lease loop shows signs of
// life (whatever its state, so that a database outage never gets the
// process restarted), and through a restart policy's wait; 503 once it has
// been silent for longer than its window or the lease has stopped for good.
func (m *Monitor) ServeHealth(w http.ResponseWriter, _ *http.Request) {
	st := m.status()
	over, quiet, limit := liveness([]status{st}, time.Time{}, m.now(), m.staleAfter)
	switch {
	case over:
		httpStatus(w, http.StatusServiceUnavailable, "stopped: the lease has ended and will not run again")
	case quiet > limit:
		httpStatus(w, http.StatusServiceUnavailable, stuck(quiet, limit))
	default:
		httpStatus(w, http.StatusOK, fmt.Sprintf("ok: %s, last sign of life %s ago", st.name(), quiet.Round(time.Millisecond)))
	}
}

// ServeReady answers /readyz: 200 while the lease is connected to a
// primary that it may lead on, leading or standing by; 503 while it
// connects, is refused (a standby, a transaction-mode pooler) or has
// stopped.
func (m *Monitor) ServeReady(w http.ResponseWriter, _ *http.Request) {
	if ready, name := m.status().readiness(); ready {
		httpStatus(w, http.StatusOK, "ready: "+name)
	} else {
		httpStatus(w, http.StatusServiceUnavailable, "not ready: "+name+readyHint)
	}
}

// ServeMetrics answers /metrics in Prometheus' text format:
// leasectl_lease_leader, leasectl_lease_epoch, leasectl_lease_transitions_total
// (by the state entered), leasectl_lease_leaderless_seconds_total,
// leasectl_lease_program_starts_total and, once there was one,
// leasectl_lease_heartbeat_age_seconds, each labelled with role and key.
func (m *Monitor) ServeMetrics(w http.ResponseWriter, _ *http.Request) {
	writeMetrics(w, []values{m.values()})
}

// Serve serves h (usually [Monitor.Handler] or [Set.Handler]) on addr
// until the returned function is called, which shuts the server down
// within a second. It logs the metrics URL ("serving metrics") to logger,
// so that a port chosen by the system (addr ":0") can be found. The error
// is net.Listen's.
func Serve(addr string, h http.Handler, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	if logger != nil {
		logger.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// status is a lease's state as the health checks judge it.
type status struct {
	ident        string
	state        lease.State
	restartIn    time.Duration
	lastActivity time.Time
}

func (m *Monitor) status() status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return status{ident: m.ident, state: m.state, restartIn: m.restartIn, lastActivity: m.lastActivity}
}

// name is the state /healthz and /readyz report: "starting" before the
// first state, "restarting" through a restart policy's wait.
func (st status) name() string {
	if st.restartIn > 0 {
		return "restarting"
	}
	return stateName(st.state)
}

// readiness says whether the lease is ready, leading or standing by on a
// primary, and names its state.
func (st status) readiness() (ready bool, name string) {
	if st.state == lease.Leading || st.state == lease.StandingBy {
		return true, string(st.state)
	}
	return false, st.name()
}

// over says the lease has stopped and no restart is pending.
func (st status) over() bool { return st.state == lease.Stopped && st.restartIn == 0 }

// readyHint follows the state of a lease that is not ready.
const readyHint = " (ready once leading or standing by on a primary)"

// liveness judges a lease loop that runs the leases of sts, as /healthz
// does: over when every lease (at least one) has stopped for good; quiet
// is how long ago the loop last showed a sign of life (the latest of the
// leases' and last), and limit how long it may stay quiet: window, grown
// by a restart policy's wait while every lease that will run again waits
// for one, by the shortest wait (the run after it ends the quiet).
func liveness(sts []status, last, now time.Time, window time.Duration) (over bool, quiet, limit time.Duration) {
	var wait time.Duration
	over, waiting := len(sts) > 0, len(sts) > 0
	for _, st := range sts {
		if st.lastActivity.After(last) {
			last = st.lastActivity
		}
		if st.over() {
			continue
		}
		over = false
		switch {
		case st.restartIn == 0:
			waiting = false
		case wait == 0 || st.restartIn < wait:
			wait = st.restartIn
		}
	}
	limit = window
	if waiting {
		limit += wait
	}
	return over, now.Sub(last), limit
}

func stuck(quiet, limit time.Duration) string {
	return fmt.Sprintf("stuck: the lease loop has shown no sign of life for %s (limit %s)", quiet.Round(time.Second), limit)
}

// values are a lease's metrics at one moment, as /metrics writes them.
type values struct {
	labels      string
	leading     bool
	epoch       int64
	transitions map[lease.State]int
	leaderless  time.Duration
	children    int
	lastBeat    time.Time
}

func (m *Monitor) values() values {
	m.mu.Lock()
	defer m.mu.Unlock()
	return values{labels: m.labels, leading: m.leading, epoch: m.epoch, transitions: maps.Clone(m.transitions),
		leaderless: m.leaderless, children: m.children, lastBeat: m.lastBeat}
}

// family is one metric family of /metrics: its HELP and TYPE lines, and
// how to write one lease's samples. A sparse family is left out when no
// lease has a sample of it.
type family struct {
	head    string
	sparse  bool
	samples func(w io.Writer, v *values)
}

var families = []family{
	{head: "# HELP leasectl_lease_leader 1 while this replica holds the lease, else 0.\n# TYPE leasectl_lease_leader gauge\n",
		samples: func(w io.Writer, v *values) {
			leading := 0
			if v.leading {
				leading = 1
			}
			fmt.Fprintf(w, "leasectl_lease_leader{%s} %d\n", v.labels, leading)
		}},
	{head: "# HELP leasectl_lease_epoch Epoch of the term this replica leads or last led; 0 before it led a term.\n# TYPE leasectl_lease_epoch gauge\n",
		samples: func(w io.Writer, v *values) {
			fmt.Fprintf(w, "leasectl_lease_epoch{%s} %d\n", v.labels, v.epoch)
		}},
	{head: "# HELP leasectl_lease_transitions_total State changes of the lease, by the state entered.\n# TYPE leasectl_lease_transitions_total counter\n",
		samples: func(w io.Writer, v *values) {
			states := make([]string, 0, len(v.transitions))
			for s := range v.transitions {
				states = append(states, string(s))
			}
			sort.Strings(states)
			for _, s := range states {
				fmt.Fprintf(w, "leasectl_lease_transitions_total{%s,state=%q} %d\n", v.labels, s, v.transitions[lease.State(s)])
			}
		}},
	{head: "# HELP leasectl_lease_leaderless_seconds_total Seconds the role had no term before each term this replica began, summed.\n# TYPE leasectl_lease_leaderless_seconds_total counter\n",
		samples: func(w io.Writer, v *values) {
			fmt.Fprintf(w, "leasectl_lease_leaderless_seconds_total{%s} %.3f\n", v.labels, v.leaderless.Seconds())
		}},
	{head: "# HELP leasectl_lease_program_starts_total Times the program was started.\n# TYPE leasectl_lease_program_starts_total counter\n",
		samples: func(w io.Writer, v *values) {
			fmt.Fprintf(w, "leasectl_lease_program_starts_total{%s} %d\n", v.labels, v.children)
		}},
	{head: "# HELP leasectl_lease_heartbeat_age_seconds Seconds since the last round trip that proved the lease session alive.\n# TYPE leasectl_lease_heartbeat_age_seconds gauge\n",
		sparse: true,
		samples: func(w io.Writer, v *values) {
			if !v.lastBeat.IsZero() {
				fmt.Fprintf(w, "leasectl_lease_heartbeat_age_seconds{%s} %.3f\n", v.labels, time.Since(v.lastBeat).Seconds())
			}
		}},
}

// writeMetrics writes the metrics of leases vs in Prometheus' text format:
// each family's HELP and TYPE once, followed by the samples of every
// lease, in the order of vs.
func writeMetrics(w http.ResponseWriter, vs []values) {
	var out, samples bytes.Buffer
	for _, f := range families {
		samples.Reset()
		for i := range vs {
			f.samples(&samples, &vs[i])
		}
		if f.sparse && samples.Len() == 0 {
			continue
		}
		out.WriteString(f.head)
		out.Write(samples.Bytes())
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(out.Bytes())
}

func stateName(s lease.State) string {
	if s == "" {
		return "starting"
	}
	return string(s)
}

func httpStatus(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, body)
}

// activityHandler passes log records on to Handler and calls mark for each:
// a log record of the lease loop is a sign of life.
type activityHandler struct {
	slog.Handler
	mark func()
}

func (h *activityHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mark()
	return h.Handler.Handle(ctx, r)
}

func (h *activityHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &activityHandler{Handler: h.Handler.WithAttrs(attrs), mark: h.mark}
}

func (h *activityHandler) WithGroup(name string) slog.Handler {
	return &activityHandler{Handler: h.Handler.WithGroup(name), mark: h.mark}
}

// escapeLabel escapes a Prometheus label value: backslash, double quote
// and newline.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
