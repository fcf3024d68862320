package leaseapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// watchKeepalive is how often a quiet watch stream gets a comment line, so
// that a client (or a proxy) whose peer is gone notices.
const watchKeepalive = 15 * time.Second

// Handler serves the API at /v1/; every other path goes to other (the
// lease's /metrics, /healthz and /readyz, leasehttp.Set.Handler), or is
// not found when other is nil.
func (a *API) Handler(other http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/roles", a.serveRoles)
	mux.HandleFunc("GET /v1/roles/{role}", a.serveRole)
	mux.HandleFunc("POST /v1/roles/{role}/alive", a.serveAlive)
	mux.HandleFunc("POST /v1/roles/{role}/resign", a.serveResign)
	mux.HandleFunc("GET /v1/watch", a.serveWatch)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint: %s %s (see GET /v1/roles, GET /v1/roles/ROLE, GET /v1/watch, POST /v1/roles/ROLE/alive, POST /v1/roles/ROLE/resign)", r.Method, r.URL.Path))
	})
	if other != nil {
		mux.Handle("/", other)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: msg})
}

func (a *API) serveRoles(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.States())
}

// unknownRole answers a request for a role this API does not serve.
func (a *API) unknownRole(w http.ResponseWriter, name string) {
	names := append([]string(nil), a.order...)
	sort.Strings(names)
	writeError(w, http.StatusNotFound, fmt.Sprintf("unknown role %q: this serve holds %s", name, strings.Join(names, ", ")))
}

// serveRole answers GET /v1/roles/ROLE, at once or, with epoch (and
// wait), as a blocking query.
func (a *API) serveRole(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("role")
	q := req.URL.Query()
	epochArg, waitArg := q.Get("epoch"), q.Get("wait")
	if epochArg == "" && waitArg == "" {
		st, ok := a.State(name)
		if !ok {
			a.unknownRole(w, name)
			return
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	epoch, wait, msg := blockingArgs(epochArg, waitArg)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		a.mu.Lock()
		r := a.roles[name]
		if r == nil {
			a.mu.Unlock()
			a.unknownRole(w, name)
			return
		}
		changed := a.changed
		if r.epoch != epoch {
			st := a.state(r)
			a.mu.Unlock()
			writeJSON(w, http.StatusOK, st)
			return
		}
		a.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			st, _ := a.State(name)
			writeJSON(w, http.StatusOK, st)
			return
		case <-req.Context().Done():
			return
		}
	}
}

// blockingArgs parses a blocking query's epoch and wait; msg says what is
// wrong with them.
func blockingArgs(epochArg, waitArg string) (epoch int64, wait time.Duration, msg string) {
	if epochArg == "" {
		return 0, 0, "wait needs epoch=E: the epoch of the answer you have (0 while not leading); the query answers when the epoch differs from it"
	}
	epoch, err := strconv.ParseInt(epochArg, 10, 64)
	if err != nil || epoch < 0 {
		return 0, 0, fmt.Sprintf("invalid epoch %q: want the epoch of the last answer, a whole number from 0", epochArg)
	}
	wait = DefaultWait
	if waitArg != "" {
		wait, err = time.ParseDuration(waitArg)
		if err != nil || wait <= 0 {
			return 0, 0, fmt.Sprintf("invalid wait %q: want a positive duration such as 30s or 5m (at most %s)", waitArg, MaxWait)
		}
	}
	return epoch, min(wait, MaxWait), ""
}

// serveAlive records the application's check-in: POST /v1/roles/ROLE/alive.
func (a *API) serveAlive(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("role")
	a.mu.Lock()
	r := a.roles[name]
	if r == nil {
		a.mu.Unlock()
		a.unknownRole(w, name)
		return
	}
	r.alive = time.Now()
	st := a.state(r)
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

// serveResign steps the role down: POST /v1/roles/ROLE/resign[?epoch=E].
// It answers once the role shows as not led here. After the role was lost
// (or the API stepped it down), a resign of that term's epoch says that
// the application has stopped, and lets the term end at once.
func (a *API) serveResign(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("role")
	var epoch int64
	if arg := req.URL.Query().Get("epoch"); arg != "" {
		e, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || e < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid epoch %q: want the epoch of the term to resign, a whole number from 1", arg))
			return
		}
		epoch = e
	}
	a.mu.Lock()
	r := a.roles[name]
	if r == nil {
		a.mu.Unlock()
		a.unknownRole(w, name)
		return
	}
	switch {
	case r.leading && (epoch == 0 || epoch == r.epoch):
		close(r.resign)
		r.resign = make(chan struct{}) // a second resign is a no-op
		for r.leading && r.epoch != 0 && (epoch == 0 || epoch == r.epoch) {
			changed := a.changed
			a.mu.Unlock()
			select {
			case <-changed:
			case <-req.Context().Done():
				return
			}
			a.mu.Lock()
		}
	case r.ack != nil && (epoch == 0 || epoch == r.ackEpoch):
		close(r.ack)
		r.ack = nil
	case epoch != 0:
		a.mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("role %s: epoch %d is not this replica's term (it may have ended already)", name, epoch))
		return
	default:
		a.mu.Unlock()
		writeError(w, http.StatusConflict, fmt.Sprintf("role %s is not led by this replica: nothing to resign", name))
		return
	}
	st := a.state(r)
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

// serveWatch streams Server-Sent Events: GET /v1/watch. First an event with
// the state of every role, then one each time a role's leader or epoch
// changes.
func (a *API) serveWatch(w http.ResponseWriter, req *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "this connection cannot stream")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	type sent struct {
		leader bool
		epoch  int64
	}
	last := map[string]sent{}
	keepalive := time.NewTicker(watchKeepalive)
	defer keepalive.Stop()
	var id int64
	for {
		a.mu.Lock()
		changed := a.changed
		var events []RoleState
		for _, name := range a.order {
			r := a.roles[name]
			if s, ok := last[name]; ok && s == (sent{r.leading, r.epoch}) {
				continue
			}
			last[name] = sent{r.leading, r.epoch}
			events = append(events, a.state(r))
		}
		a.mu.Unlock()
		for _, st := range events {
			id++
			data, _ := json.Marshal(st)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: role\ndata: %s\n\n", id, data); err != nil {
				return
			}
		}
		if len(events) > 0 {
			flusher.Flush()
		}
		select {
		case <-changed:
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-req.Context().Done():
			return
		}
	}
}
