package leasehttp

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/lease"
)

// Set is the metrics and health of the leases of many roles that one lease
// loop runs in one process: a [Monitor] per role, reported to through the
// loop's hooks that the Set routes, and handlers that answer /metrics,
// /healthz and /readyz for all of them. It is safe for concurrent use.
type Set struct {
	mu     sync.Mutex
	roles  []*Monitor // in the order added
	byKey  map[int64]*Monitor
	window time.Duration
	now    func() time.Time
	// lastActivity is the loop's last sign of life through the Set's own
	// hooks, which mark every role too: it is what /healthz of a Set
	// without roles judges.
	lastActivity time.Time
}

// NewSet returns an empty Set. window is how long the lease loop may show
// no sign of life before /healthz fails (see [HealthWindow]); zero means
// the window of a lease with the default settings.
func NewSet(window time.Duration) *Set {
	if window <= 0 {
		window = HealthWindow(lease.Config{}, 0)
	}
	s := &Set{byKey: map[int64]*Monitor{}, window: window, now: time.Now}
	s.lastActivity = s.now()
	return s
}

// Add adds the lease of role and key (an empty role is "key N", as for
// [New]) and returns its Monitor, whose OnStart and OnRestart the caller
// wires to that role's program and restart policy; the Set routes the
// loop's state changes to it. Add panics if the Set has the key already:
// state changes are routed by key.
func (s *Set) Add(role string, key int64) *Monitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byKey[key]; ok {
		panic(fmt.Sprintf("leasehttp: key %d added twice to a Set", key))
	}
	m := New(role, key, s.window)
	m.now = s.now
	m.lastActivity = m.now()
	s.roles = append(s.roles, m)
	s.byKey[key] = m
	return m
}

// members returns the Set's monitors, in the order added.
func (s *Set) members() []*Monitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Monitor(nil), s.roles...)
}

// Mark records a sign of life of the lease loop, for every role. The
// hooks mark too; so does every record that passes the handler of
// [Set.LogHandler].
func (s *Set) Mark() {
	s.mu.Lock()
	s.lastActivity = s.now()
	s.mu.Unlock()
	for _, m := range s.members() {
		m.Mark()
	}
}

// OnStateChange records a state change of the role of c.Key (see
// [Monitor.OnStateChange]); it fits the loop's OnStateChange. A change of a
// key the Set does not have is only a sign of life.
func (s *Set) OnStateChange(c lease.Change) {
	s.mu.Lock()
	m := s.byKey[c.Key]
	s.mu.Unlock()
	if m == nil {
		s.Mark()
		return
	}
	m.OnStateChange(c)
}

// OnHeartbeat records a round trip that proved the loop's shared session
// alive, for every role (see [Monitor.OnHeartbeat]).
func (s *Set) OnHeartbeat(at time.Time) {
	s.mu.Lock()
	s.lastActivity = s.now()
	s.mu.Unlock()
	for _, m := range s.members() {
		m.OnHeartbeat(at)
	}
}

// LogHandler returns a handler that passes every record on to h and marks
// a sign of life for every role (see [Set.Mark]). Give the loop a logger
// with it.
func (s *Set) LogHandler(h slog.Handler) slog.Handler {
	return &activityHandler{Handler: h, mark: s.Mark}
}

// Handler serves the metrics of every role at /metrics and the health
// checks at /healthz and /readyz.
func (s *Set) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", s.ServeMetrics)
	mux.HandleFunc("/healthz", s.ServeHealth)
	mux.HandleFunc("/readyz", s.ServeReady)
	return mux
}

// ServeMetrics answers /metrics with the metrics of [Monitor.ServeMetrics]
// for every role: each family once, with the samples of every role in the
// order added.
func (s *Set) ServeMetrics(w http.ResponseWriter, _ *http.Request) {
	ms := s.members()
	vs := make([]values, len(ms))
	for i, m := range ms {
		vs[i] = m.values()
	}
	writeMetrics(w, vs)
}

// ServeHealth answers /healthz for the loop that runs every role's lease:
// 200 while it shows signs of life (for any role; whatever the states), and
// through a restart policy's wait while every role that will run again
// waits for one; 503 once it has been silent for longer than its window,
// or every role's lease has stopped for good. The body has a line per
// role with its state.
func (s *Set) ServeHealth(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	last := s.lastActivity
	s.mu.Unlock()
	sts := s.statuses()
	over, quiet, limit := liveness(sts, last, s.now(), s.window)
	var head string
	code := http.StatusServiceUnavailable
	switch {
	case over:
		head = "stopped: every role's lease has ended and will not run again"
	case quiet > limit:
		head = stuck(quiet, limit)
	default:
		code = http.StatusOK
		head = fmt.Sprintf("ok: %s, last sign of life %s ago", roles(len(sts)), quiet.Round(time.Millisecond))
	}
	httpStatus(w, code, roleLines(head, sts, status.name))
}

// ServeReady answers /readyz: 200 when every role is ready, leading or
// standing by on a primary; 503 while any role is not, and for a Set
// without roles. The body has a line per role with its state, such as
// `role="poller" key="1840000001" leading`.
func (s *Set) ServeReady(w http.ResponseWriter, _ *http.Request) {
	sts := s.statuses()
	notReady := 0
	for _, st := range sts {
		if ready, _ := st.readiness(); !ready {
			notReady++
		}
	}
	name := func(st status) string { _, n := st.readiness(); return n }
	switch {
	case len(sts) == 0:
		httpStatus(w, http.StatusServiceUnavailable, "not ready: no roles")
	case notReady == 0:
		httpStatus(w, http.StatusOK, roleLines("ready: "+roles(len(sts)), sts, name))
	default:
		httpStatus(w, http.StatusServiceUnavailable, roleLines(fmt.Sprintf("not ready: %d of %d roles%s", notReady, len(sts), readyHint), sts, name))
	}
}

func (s *Set) statuses() []status {
	ms := s.members()
	sts := make([]status, len(ms))
	for i, m := range ms {
		sts[i] = m.status()
	}
	return sts
}

// roleLines is head followed by a line per role: its ident and its name.
func roleLines(head string, sts []status, name func(status) string) string {
	var b strings.Builder
	b.WriteString(head)
	for _, st := range sts {
		fmt.Fprintf(&b, "\n%s %s", st.ident, name(st))
	}
	return b.String()
}

// roles is "1 role" or "N roles".
func roles(n int) string {
	if n == 1 {
		return "1 role"
	}
	return fmt.Sprintf("%d roles", n)
}
