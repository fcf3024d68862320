package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Front doors are what a client may find between itself and the primary
// besides PgBouncer: pgpool-II load-balancing reads to the standby, HAProxy
// in TCP mode, and a local unix-socket relay such as the Cloud SQL Auth
// Proxy serves. Each runs as the server OS user, in a session of its own,
// from a directory of the lab's run dir, with its output in a log file
// there, and is stopped by [Lab.Stop].

// PgPoolSpec asks for pgpool-II in front of the primary and the standby,
// with load balancing on: a SELECT that calls no volatile function may be
// answered by the standby, while writes and volatile functions (among them
// pg_try_advisory_lock and pg_is_in_recovery) go to the primary.
type PgPoolSpec struct {
	// Mode is pgpool's clustering mode: empty for streaming replication
	// over the primary and its standby, or NativeReplication, where pgpool
	// itself writes to the primary and the twin (a second, unrelated
	// primary; see Twin), and no standby is needed.
	Mode string `json:"mode,omitempty"`
	// Settings are further pgpool.conf settings, which win over the lab's
	// own. Values are written as they are, so strings need their quotes:
	// "write_function_list" set to "'nextval,setval'", or
	// "load_balance_mode" set to "off".
	Settings map[string]string `json:"settings,omitempty"`
}

// PgPool is the running pgpool-II of a lab.
type PgPool struct {
	PgPoolSpec
	// Port is where pgpool listens on 127.0.0.1.
	Port int `json:"port"`
	// Version is the output of `pgpool --version`.
	Version string `json:"version"`
	// ConfigFile is its pgpool.conf; pool_hba.conf, pool_passwd and
	// pcp.conf are beside it, with its unix sockets.
	ConfigFile string `json:"config_file"`
	// PIDFile holds the pid of its main process.
	PIDFile string `json:"pid_file"`
	// LogFile receives its log.
	LogFile string `json:"log_file"`
	// Twin is its second backend in native replication mode; nil in
	// streaming replication mode.
	Twin *Server `json:"twin,omitempty"`
}

// NativeReplication is the PgPoolSpec.Mode in which pgpool-II replicates
// writes itself, to every backend: each is a writable primary.
const NativeReplication = "native_replication"

// HAProxySpec describes one HAProxy instance of a lab: one haproxy process
// in TCP mode, with no health checks, in front of the lab's servers.
type HAProxySpec struct {
	// Name identifies the instance in DSN lookups and in its directory.
	Name string `json:"name"`
	// Backends are the servers behind it, each "primary", "standby" or
	// "twin" (TwinBackend: a second primary that shares nothing with the
	// first, which the lab then starts), in order; "standby" needs a lab
	// with a standby.
	Backends []string `json:"backends"`
	// Balance is HAProxy's balance algorithm; empty means "roundrobin",
	// where each new connection goes to the next server.
	Balance string `json:"balance,omitempty"`
	// TimeoutClient is `timeout client`: a session whose client side has
	// been idle this long is cut. Zero means an hour.
	TimeoutClient time.Duration `json:"timeout_client,omitempty"`
	// TimeoutServer is `timeout server`, likewise for the server side. Zero
	// means an hour.
	TimeoutServer time.Duration `json:"timeout_server,omitempty"`
}

// HAProxy is one running HAProxy instance of a lab.
type HAProxy struct {
	HAProxySpec
	// Port is where the instance listens on 127.0.0.1.
	Port int `json:"port"`
	// Version is the first line of `haproxy -v`.
	Version string `json:"version"`
	// ConfigFile is its haproxy.cfg.
	ConfigFile string `json:"config_file"`
	// PIDFile holds its pid.
	PIDFile string `json:"pid_file"`
	// LogFile receives its log: a line per session (option tcplog), with
	// HAProxy's termination state ("cD": the client timed out).
	LogFile string `json:"log_file"`
	// Twin is the twin when a backend names it; nil otherwise.
	Twin *Server `json:"twin,omitempty"`
}

// Relay is one running socat relay of a lab: a unix socket that forwards
// each connection to the primary's TCP port, the way the Cloud SQL Auth
// Proxy serves a local socket. The server sees its clients as TCP clients
// from 127.0.0.1.
type Relay struct {
	// Name identifies the relay in DSN lookups.
	Name string `json:"name"`
	// SocketDir is the directory of the socket: the host of a DSN.
	SocketDir string `json:"socket_dir"`
	// Port is the number in the socket's name, .s.PGSQL.<Port>: the port of
	// a DSN. It is 5432, as under the Cloud SQL Auth Proxy.
	Port int `json:"port"`
	// Socket is the socket's path.
	Socket string `json:"socket"`
	// PIDFile holds the pid of the listening socat, which forks one
	// process per connection.
	PIDFile string `json:"pid_file"`
	// LogFile receives socat's warnings and errors.
	LogFile string `json:"log_file"`
}

// relayPort is the number in every relay socket's name.
const relayPort = 5432

// longTimeout is what a zero HAProxy timeout stands for.
const longTimeout = time.Hour

// maxHAProxyTimeout is the longest timeout HAProxy accepts (2^31-1 ms).
const maxHAProxyTimeout = (1<<31 - 1) * time.Millisecond

// isFrontDoorName reports whether name can name a front door (it becomes
// part of file names and configuration): 1 to 40 letters, digits, '_', '.'
// or '-', starting with a letter or digit. Checked by hand: the regular
// expression it replaces was most of this package's init, which every
// leasectl command paid at start-up.
func isFrontDoorName(name string) bool {
	if name == "" || len(name) > 40 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
		if !alnum && (i == 0 || (c != '_' && c != '.' && c != '-')) {
			return false
		}
	}
	return true
}

// checkFrontDoors rejects front-door options that cannot work, before Start
// starts anything.
func checkFrontDoors(opts Options) error {
	if opts.PgPool != nil {
		switch opts.PgPool.Mode {
		case "":
			if !opts.Standby {
				return errors.New("lab options: PgPool needs a standby to balance reads to (set Standby: true), or Mode NativeReplication")
			}
		case NativeReplication:
		default:
			return fmt.Errorf("lab options: PgPool Mode %q: use \"\" (streaming replication over primary and standby) or %q", opts.PgPool.Mode, NativeReplication)
		}
	}
	seen := map[string]bool{}
	for _, h := range opts.HAProxy {
		if !isFrontDoorName(h.Name) {
			return fmt.Errorf("lab options: HAProxy name %q: use 1 to 40 letters, digits, '_', '.' or '-', starting with a letter or digit", h.Name)
		}
		if seen[h.Name] {
			return fmt.Errorf("lab options: two HAProxy instances are called %q: give each its own name", h.Name)
		}
		seen[h.Name] = true
		if len(h.Backends) == 0 {
			return fmt.Errorf("lab options: HAProxy %s has no Backends: list \"primary\", \"standby\" or both", h.Name)
		}
		for _, b := range h.Backends {
			switch b {
			case "primary", TwinBackend:
			case "standby":
				if !opts.Standby {
					return fmt.Errorf("lab options: HAProxy %s has the standby as a backend, and the lab has none (set Standby: true)", h.Name)
				}
			default:
				return fmt.Errorf("lab options: HAProxy %s: backend %q is neither \"primary\" nor \"standby\", nor %q (a second, unrelated primary)", h.Name, b, TwinBackend)
			}
		}
		if strings.ContainsAny(h.Balance, "\n\r") {
			return fmt.Errorf("lab options: HAProxy %s: Balance %q spans lines: give one balance algorithm, e.g. \"roundrobin\" or \"leastconn\"", h.Name, h.Balance)
		}
		for what, d := range map[string]time.Duration{"TimeoutClient": h.TimeoutClient, "TimeoutServer": h.TimeoutServer} {
			if d < 0 || d > maxHAProxyTimeout {
				return fmt.Errorf("lab options: HAProxy %s: %s %v is out of range: use 0 (an hour) or up to %v", h.Name, what, d, maxHAProxyTimeout)
			}
		}
	}
	seen = map[string]bool{}
	for _, name := range opts.Relays {
		if !isFrontDoorName(name) {
			return fmt.Errorf("lab options: relay name %q: use 1 to 40 letters, digits, '_', '.' or '-', starting with a letter or digit", name)
		}
		if seen[name] {
			return fmt.Errorf("lab options: two relays are called %q: give each its own name", name)
		}
		seen[name] = true
	}
	return nil
}

// frontDoorPorts is how many TCP ports the front doors of opts need.
func frontDoorPorts(opts Options) int {
	n := len(opts.HAProxy)
	if opts.PgPool != nil {
		n++
	}
	if needsTwin(opts) {
		n++ // the twin's, the last one
	}
	return n
}

// startFrontDoors starts the twin when a front door needs it, then
// pgpool-II, the relays and the HAProxy instances, on the given ports. Each
// process is recorded in l as soon as it runs, so that Stop ends it whatever
// happens next.
func (l *Lab) startFrontDoors(ctx context.Context, opts Options, ports []int, password string) error {
	var twin *Server
	if needsTwin(opts) {
		t, err := l.startTwin(ctx, ports[len(ports)-1], password)
		if err != nil {
			return err
		}
		twin, ports = t, ports[:len(ports)-1]
	}
	if opts.PgPool != nil {
		if err := l.startPgPool(ctx, *opts.PgPool, ports[0], password, twin); err != nil {
			return err
		}
		ports = ports[1:]
	}
	for _, name := range opts.Relays {
		if err := l.startRelay(ctx, name); err != nil {
			return err
		}
	}
	for i, spec := range opts.HAProxy {
		if err := l.startHAProxy(ctx, spec, ports[i], twin); err != nil {
			return err
		}
	}
	return nil
}

// frontDoorDir makes a directory of the run dir for one front door, owned
// by the server user.
func (l *Lab) frontDoorDir(name string) (string, error) {
	dir := filepath.Join(l.RunDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, l.chown(dir)
}

// ---- pgpool-II ----

// startPgPool starts pgpool-II in front of the primary (backend 0) and the
// standby (backend 1), or in native replication mode in front of the
// primary and the twin.
//
// Authentication: clients log in to pgpool with SCRAM (pool_hba.conf), and
// pgpool logs in to each backend with SCRAM on its own, as any client of
// 127.0.0.1 would: the servers' pg_hba.conf is left as it is. A SCRAM
// exchange cannot be relayed to two servers at once, so pgpool has to know
// the password itself: pool_passwd holds it in clear text (the "TEXT"
// prefix), as PgBouncer's userlist.txt does, in a 0600 file of the server
// user under the lab's 0700 run dir. For a throwaway lab with a random
// password and loopback-only listeners that is safe enough, and it needs no
// trust rule anywhere. The same entry serves sr_check_user, with which
// pgpool finds out at start which backend is the primary
// (sr_check_password is empty, so pgpool takes it from pool_passwd).
func (l *Lab) startPgPool(ctx context.Context, spec PgPoolSpec, port int, password string, twin *Server) error {
	native := spec.Mode == NativeReplication
	switch {
	case native && twin == nil:
		return errors.New("pgpool in native replication mode needs the twin, and there is none")
	case !native && l.Standby == nil:
		return errors.New("pgpool needs the lab's standby, and there is none (start the lab with Standby: true)")
	}
	dir, err := l.frontDoorDir("pgpool")
	if err != nil {
		return err
	}
	p := &PgPool{
		PgPoolSpec: spec,
		Port:       port,
		ConfigFile: filepath.Join(dir, "pgpool.conf"),
		PIDFile:    filepath.Join(dir, "pgpool.pid"),
		LogFile:    filepath.Join(dir, "pgpool.log"),
	}
	if native {
		p.Twin = twin
	}
	if out, err := exec.CommandContext(ctx, l.Bin.PgPool, "--version").CombinedOutput(); err == nil {
		p.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	files := map[string]string{
		"pool_passwd": poolPasswdLine(l.User, password),
		"pool_hba.conf": "# leasectl lab: SCRAM against pool_passwd, from this host only\n" +
			"local all all scram-sha-256\n" +
			"host  all all 127.0.0.1/32 scram-sha-256\n",
		"pcp.conf":    "# leasectl lab: no PCP users\n",
		"pgpool.conf": l.pgpoolConf(p),
	}
	for name, content := range files {
		if err := l.writeFile(filepath.Join(dir, name), content); err != nil {
			return err
		}
	}
	if native {
		l.logf("start pgpool-II on 127.0.0.1:%d (native replication over primary %d and twin %d)", port, l.Primary.Port, twin.Port)
	} else {
		l.logf("start pgpool-II on 127.0.0.1:%d (primary %d, standby %d, load balancing)", port, l.Primary.Port, l.Standby.Port)
	}
	// -n: stay in the foreground, so that its log goes to our file; -D:
	// forget any saved backend status.
	pid, err := l.spawn(dir, l.Bin.PgPool, []string{"-n", "-D", "-f", p.ConfigFile, "-F", filepath.Join(dir, "pcp.conf"), "-a", filepath.Join(dir, "pool_hba.conf")}, p.LogFile, p.PIDFile)
	if pid > 0 {
		l.PgPool = p
	}
	if err != nil {
		return err
	}
	// pgpool opens its port before it knows which backend is the primary,
	// and gives up looking after search_primary_node_timeout; without a
	// primary it would send everything to the wrong place. In native
	// replication mode it looks for none.
	ready := func() (bool, error) {
		log := readFile(p.LogFile)
		switch {
		case !strings.Contains(log, "successfully started"):
			return false, nil
		case !native && !strings.Contains(log, "primary node is 0"):
			return false, fmt.Errorf("it started without finding the primary among its backends (can sr_check_user %s log in with the password in pool_passwd?)", l.User)
		}
		return dialOK(port), nil
	}
	if err := waitProcess(ctx, pid, ready, 30*time.Second); err != nil {
		return fmt.Errorf("pgpool-II on port %d did not come up knowing the primary (backend 0): %w\n%s%s", port, err, logProblems(p.LogFile, 5), tail(p.LogFile, 10))
	}
	return nil
}

// logProblems returns the first n lines of a log that report an error or
// a failure, for error messages: the last lines are often only retries.
func logProblems(path string, n int) string {
	var out []string
	for _, line := range strings.Split(readFile(path), "\n") {
		if len(out) < n && (strings.Contains(line, "ERROR") || strings.Contains(line, "FATAL") || strings.Contains(line, "WARNING") || strings.Contains(line, "failed")) {
			out = append(out, "  "+line)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "first problems:\n" + strings.Join(out, "\n") + "\n"
}

// pgpoolConf renders p's pgpool.conf: streaming-replication mode (or native
// replication over primary and twin) with load balancing, and nothing that
// watches, fails over or reconnects on its own (no health checks, failover,
// watchdog or replication-delay checks), so that the lab's own restarts and
// promotions are not second-guessed.
func (l *Lab) pgpoolConf(p *PgPool) string {
	dir := filepath.Dir(p.ConfigFile)
	q := func(s string) string { return "'" + s + "'" }
	mode, second, secondName := "streaming_replication", 0, "standby"
	switch {
	case p.Mode == NativeReplication && p.Twin != nil:
		mode, second, secondName = NativeReplication, p.Twin.Port, twinName
	case l.Standby != nil:
		second = l.Standby.Port
	}
	settings := [][2]string{
		{"backend_clustering_mode", q(mode)},
		{"listen_addresses", q("127.0.0.1")},
		{"port", strconv.Itoa(p.Port)},
		{"unix_socket_directories", q(dir)},
		// PCP only on a unix socket of its own directory: no second TCP port.
		{"pcp_listen_addresses", q("")},
		{"pcp_socket_dir", q(dir)},
		{"wd_ipc_socket_dir", q(dir)},
		// pgpool writes its own pid file too; ours is PIDFile.
		{"pid_file_name", q(filepath.Join(dir, pgpoolOwnPIDFile))},
		{"logdir", q(dir)},
		{"log_destination", q("stderr")},
		{"logging_collector", "off"},
		{"backend_hostname0", q("127.0.0.1")},
		{"backend_port0", strconv.Itoa(l.Primary.Port)},
		{"backend_weight0", "1"},
		{"backend_flag0", q("DISALLOW_TO_FAILOVER")},
		{"backend_application_name0", q("primary")},
		{"backend_hostname1", q("127.0.0.1")},
		{"backend_port1", strconv.Itoa(second)},
		{"backend_weight1", "1"},
		{"backend_flag1", q("DISALLOW_TO_FAILOVER")},
		{"backend_application_name1", q(secondName)},
		{"enable_pool_hba", "on"},
		{"pool_passwd", q(filepath.Join(dir, "pool_passwd"))},
		{"load_balance_mode", "on"},
		{"sr_check_user", q(l.User)},
		{"sr_check_password", q("")},
		{"sr_check_period", "0"},
		{"search_primary_node_timeout", "10"},
		{"health_check_period", "0"},
		{"failover_on_backend_error", "off"},
		{"failover_command", q("")},
		{"follow_primary_command", q("")},
		{"auto_failback", "off"},
		{"use_watchdog", "off"},
		// The query cache is off, but the shared relation cache lives in
		// its shared memory, whose defaults (64MB of blocks and a hash of
		// a million entries) make a 130 MB segment, all of it resident.
		{"memqcache_total_size", q("4MB")},
		{"memqcache_max_num_cache", "10000"},
	}
	return renderConf("# leasectl lab: pgpool-II", settings, p.Settings)
}

// renderConf renders key = value lines: the lab's own, with overrides put in
// their place, then the other overrides in sorted order.
func renderConf(header string, own [][2]string, overrides map[string]string) string {
	var b strings.Builder
	b.WriteString(header + "\n")
	done := map[string]bool{}
	for _, kv := range own {
		v := kv[1]
		if o, ok := overrides[kv[0]]; ok {
			v, done[kv[0]] = o, true
		}
		fmt.Fprintf(&b, "%s = %s\n", kv[0], v)
	}
	keys := make([]string, 0, len(overrides))
	for k := range overrides {
		if !done[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, overrides[k])
	}
	return b.String()
}

func poolPasswdLine(user, password string) string {
	return user + ":TEXT" + password + "\n"
}

// PgPoolDSN is pgpool-II over TCP, as the superuser; empty when the lab has
// no pgpool.
func (l *Lab) PgPoolDSN() string {
	if l.PgPool == nil {
		return ""
	}
	return l.DSN(l.PgPool.Port, l.User, "postgres")
}

// pgpoolOwnPIDFile is the name of the pid file pgpool-II writes itself, in
// its directory.
const pgpoolOwnPIDFile = "pgpool-main.pid"

// PgPoolPID returns the pid of pgpool-II's main process, or 0 when it is
// not running. It falls back on the pid file pgpool writes itself: Stop
// must find the main process, as only a shutdown through it removes
// pgpool's shared memory and semaphores (a SIGKILL leaves them behind).
func PgPoolPID(p *PgPool) int {
	if pid := pidFromFile(p.PIDFile); pid > 0 {
		return pid
	}
	return pidFromFile(filepath.Join(filepath.Dir(p.ConfigFile), pgpoolOwnPIDFile))
}

// ---- HAProxy ----

// startHAProxy starts one HAProxy instance; twin is the lab's twin, for a
// backend that names it.
func (l *Lab) startHAProxy(ctx context.Context, spec HAProxySpec, port int, twin *Server) error {
	if spec.Balance == "" {
		spec.Balance = "roundrobin"
	}
	if spec.TimeoutClient == 0 {
		spec.TimeoutClient = longTimeout
	}
	if spec.TimeoutServer == 0 {
		spec.TimeoutServer = longTimeout
	}
	dir, err := l.frontDoorDir("haproxy-" + spec.Name)
	if err != nil {
		return err
	}
	h := &HAProxy{
		HAProxySpec: spec,
		Port:        port,
		ConfigFile:  filepath.Join(dir, "haproxy.cfg"),
		PIDFile:     filepath.Join(dir, "haproxy.pid"),
		LogFile:     filepath.Join(dir, "haproxy.log"),
	}
	if slices.Contains(spec.Backends, TwinBackend) {
		if twin == nil {
			return fmt.Errorf("haproxy %s names the twin as a backend, and there is none", spec.Name)
		}
		h.Twin = twin
	}
	if out, err := exec.CommandContext(ctx, l.Bin.HAProxy, "-v").CombinedOutput(); err == nil {
		h.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if err := l.writeFile(h.ConfigFile, l.haproxyConf(h)); err != nil {
		return err
	}
	// Check the configuration first: its errors are clearer than a process
	// that exits.
	if _, err := l.run(ctx, l.Bin.HAProxy, "-c", "-f", h.ConfigFile); err != nil {
		return fmt.Errorf("haproxy %s refuses the configuration the lab wrote for it (balance %q): check the spec's Balance against HAProxy's algorithms: %w", spec.Name, spec.Balance, err)
	}
	l.logf("start haproxy %s (%s over %s) on 127.0.0.1:%d", spec.Name, spec.Balance, strings.Join(spec.Backends, ", "), port)
	// -db: stay in the foreground, logging to our file.
	pid, err := l.spawn(dir, l.Bin.HAProxy, []string{"-db", "-f", h.ConfigFile}, h.LogFile, h.PIDFile)
	if pid > 0 {
		l.HAProxies = append(l.HAProxies, *h)
	}
	if err != nil {
		return err
	}
	if err := waitProcess(ctx, pid, func() (bool, error) { return dialOK(port), nil }, 15*time.Second); err != nil {
		return fmt.Errorf("haproxy %s did not open port %d: %w\n%s", spec.Name, port, err, tail(h.LogFile, 15))
	}
	return nil
}

// haproxyConf renders h's haproxy.cfg: TCP mode, one listener, no health
// checks (a down server is found out by the clients sent to it), a log line
// per session on standard error.
func (l *Lab) haproxyConf(h *HAProxy) string {
	ms := func(d time.Duration) int64 { return max(d.Milliseconds(), 1) }
	var b strings.Builder
	fmt.Fprintf(&b, `# leasectl lab: haproxy %s
global
    maxconn 1000
    nbthread 1
    log stderr format raw local0 info

defaults
    mode tcp
    log global
    option tcplog
    timeout connect 5s
    timeout client %dms
    timeout server %dms

listen %s
    bind 127.0.0.1:%d
    balance %s
`, h.Name, ms(h.TimeoutClient), ms(h.TimeoutServer), h.Name, h.Port, h.Balance)
	count := map[string]int{}
	for _, be := range h.Backends {
		port := l.Primary.Port
		switch {
		case be == "standby" && l.Standby != nil:
			port = l.Standby.Port
		case be == TwinBackend && h.Twin != nil:
			port = h.Twin.Port
		}
		count[be]++
		name := be
		if count[be] > 1 {
			name = fmt.Sprintf("%s-%d", be, count[be])
		}
		fmt.Fprintf(&b, "    server %s 127.0.0.1:%d\n", name, port)
	}
	return b.String()
}

// HAProxyDSN is the named HAProxy instance over TCP, as the superuser;
// empty when the lab has no such instance.
func (l *Lab) HAProxyDSN(name string) string {
	if h := l.HAProxy(name); h != nil {
		return l.DSN(h.Port, l.User, "postgres")
	}
	return ""
}

// HAProxy returns the named HAProxy instance, or nil.
func (l *Lab) HAProxy(name string) *HAProxy {
	for i := range l.HAProxies {
		if l.HAProxies[i].Name == name {
			return &l.HAProxies[i]
		}
	}
	return nil
}

// HAProxyPID returns the pid of a running HAProxy instance, or 0.
func HAProxyPID(h *HAProxy) int { return pidFromFile(h.PIDFile) }

// ---- relays ----

// startRelay starts socat listening on a unix socket of its own directory
// and forwarding each connection to the primary's TCP port.
func (l *Lab) startRelay(ctx context.Context, name string) error {
	dir, err := l.frontDoorDir("relay-" + name)
	if err != nil {
		return err
	}
	r := &Relay{
		Name:      name,
		SocketDir: dir,
		Port:      relayPort,
		Socket:    filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(relayPort)),
		PIDFile:   filepath.Join(dir, "socat.pid"),
		LogFile:   filepath.Join(dir, "socat.log"),
	}
	if len(r.Socket) > maxSocketPath {
		return fmt.Errorf("relay %s: its socket path %s is longer than the %d bytes a unix socket may have: use a shorter relay name or a shorter TMPDIR", name, r.Socket, maxSocketPath)
	}
	l.logf("start socat relay %s: %s -> 127.0.0.1:%d", name, r.Socket, l.Primary.Port)
	// fork: a process per connection; backlog: socat's default of 5 makes
	// connects fail at once (EAGAIN) under a burst; nodelay: no Nagle delay
	// on the relay's side of small messages.
	args := []string{"-d",
		"UNIX-LISTEN:" + r.Socket + ",fork,backlog=128",
		"TCP:127.0.0.1:" + strconv.Itoa(l.Primary.Port) + ",nodelay"}
	pid, err := l.spawn(dir, l.Bin.Socat, args, r.LogFile, r.PIDFile)
	if pid > 0 {
		l.Relays = append(l.Relays, *r)
	}
	if err != nil {
		return err
	}
	if err := waitProcess(ctx, pid, func() (bool, error) { return dialUnixOK(r.Socket), nil }, 15*time.Second); err != nil {
		return fmt.Errorf("relay %s did not open %s: %w\n%s", name, r.Socket, err, tail(r.LogFile, 15))
	}
	return nil
}

// RelayDSN is the named relay's unix socket, as the superuser, in
// key=value form as SocketDSN is; empty when the lab has no such relay.
func (l *Lab) RelayDSN(name string) string {
	r := l.Relay(name)
	if r == nil {
		return ""
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable passfile=%s",
		r.SocketDir, r.Port, l.User, l.PassFile)
}

// Relay returns the named relay, or nil.
func (l *Lab) Relay(name string) *Relay {
	for i := range l.Relays {
		if l.Relays[i].Name == name {
			return &l.Relays[i]
		}
	}
	return nil
}

// RelayPID returns the pid of a running relay's listening socat, or 0.
func RelayPID(r *Relay) int { return pidFromFile(r.PIDFile) }

// ---- processes ----

// spawn starts prog in the background as the server user and returns its
// pid, recorded in pidFile. It runs in a session of its own (no terminal's
// hangup reaches it, and a signal to its process group reaches its
// children), from dir (so that ProcessesUsing finds it and its children
// even once they retitle themselves), with standard output and error
// appended to logFile. It outlives the calling program; Stop ends it.
func (l *Lab) spawn(dir, prog string, args []string, logFile, pidFile string) (int, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", logFile, err)
	}
	defer f.Close()
	if err := l.chown(logFile); err != nil {
		return 0, err
	}
	c := exec.Command(prog, args...)
	c.Dir = dir
	c.Env = l.env()
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = sessionAttr(l.cred)
	if err := c.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", filepath.Base(prog), err)
	}
	pid := c.Process.Pid
	go func() { _ = c.Wait() }() // reap it should it exit while we run
	if err := l.writeFile(pidFile, strconv.Itoa(pid)+"\n"); err != nil {
		_ = stopGroup(pid, syscall.SIGKILL, 5*time.Second)
		return 0, fmt.Errorf("write %s: %w", pidFile, err)
	}
	return pid, nil
}

// waitProcess waits until ready reports true, failing early when ready
// reports an error or pid exits.
func waitProcess(ctx context.Context, pid int, ready func() (bool, error), limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if ok, err := ready(); ok || err != nil {
			return err
		}
		if !alive(pid) {
			return fmt.Errorf("it exited (pid %d)", pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopGroup sends sig to the process group that pid leads (pid and the
// children it forked) and waits until pid is gone, sending SIGKILL to the
// group when it lingers past limit. The group is signalled only while its
// leader lives, so that a recycled number is never hit.
func stopGroup(pid int, sig syscall.Signal, limit time.Duration) error {
	signal := func(sig syscall.Signal) {
		if signalGroup(pid, sig) != nil {
			_ = sendSignal(pid, sig)
		}
	}
	signal(sig)
	deadline := time.Now().Add(limit)
	for alive(pid) {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				return fmt.Errorf("pid %d did not exit", pid)
			}
			sig = syscall.SIGKILL
			signal(sig)
			deadline = time.Now().Add(limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// stopFrontDoors stops the relays, the HAProxy instances and pgpool-II, and
// then the twin.
func (l *Lab) stopFrontDoors() []error {
	var errs []error
	for i := range l.Relays {
		if pid := RelayPID(&l.Relays[i]); pid > 0 {
			errs = append(errs, stopGroup(pid, syscall.SIGTERM, 5*time.Second))
		}
	}
	for i := range l.HAProxies {
		if pid := HAProxyPID(&l.HAProxies[i]); pid > 0 {
			// SIGTERM is HAProxy's hard stop; SIGUSR1 would wait for the
			// sessions to end.
			errs = append(errs, stopGroup(pid, syscall.SIGTERM, 5*time.Second))
		}
	}
	if l.PgPool != nil {
		if pid := PgPoolPID(l.PgPool); pid > 0 {
			// SIGINT is pgpool's fast shutdown; SIGTERM would wait for
			// the clients to leave.
			errs = append(errs, stopGroup(pid, syscall.SIGINT, 5*time.Second))
		}
	}
	return append(errs, l.stopTwin()...)
}

// frontDoorStatus reports each front door's process, as Status does.
func (l *Lab) frontDoorStatus() []Component {
	var out []Component
	add := func(name, kind string, port, pid int) {
		out = append(out, Component{Name: name, Kind: kind, Port: port, PID: pid, Up: pid > 0 && dialOK(port)})
	}
	if l.PgPool != nil {
		add("pgpool", "pgpool-II", l.PgPool.Port, PgPoolPID(l.PgPool))
	}
	for i := range l.HAProxies {
		h := &l.HAProxies[i]
		add(h.Name, "haproxy "+h.Balance, h.Port, HAProxyPID(h))
	}
	for i := range l.Relays {
		r := &l.Relays[i]
		pid := RelayPID(r)
		out = append(out, Component{Name: r.Name, Kind: "socat relay", Port: r.Port, Socket: r.Socket, PID: pid, Up: pid > 0 && dialUnixOK(r.Socket)})
	}
	return append(out, l.twinStatus()...)
}

// frontDoorsAlive reports whether any front door's process still runs.
func (l *Lab) frontDoorsAlive() bool {
	if l.PgPool != nil && PgPoolPID(l.PgPool) > 0 {
		return true
	}
	for i := range l.HAProxies {
		if HAProxyPID(&l.HAProxies[i]) > 0 {
			return true
		}
	}
	for i := range l.Relays {
		if RelayPID(&l.Relays[i]) > 0 {
			return true
		}
	}
	return l.twinAlive()
}

// addFrontDoorLogin gives pgpool-II the password of an extra login role and
// has it reload, waiting until its main process has.
func (l *Lab) addFrontDoorLogin(role, password string) error {
	if l.PgPool == nil {
		return nil
	}
	if err := appendFile(filepath.Join(filepath.Dir(l.PgPool.ConfigFile), "pool_passwd"), poolPasswdLine(role, password)); err != nil {
		return err
	}
	pid := PgPoolPID(l.PgPool)
	if pid == 0 {
		return nil
	}
	const reloaded = "reload config files"
	before := strings.Count(readFile(l.PgPool.LogFile), reloaded)
	if err := sendSignal(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload pgpool-II: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(readFile(l.PgPool.LogFile), reloaded) == before; {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgpool-II did not log the reload within 10s\n%s", tail(l.PgPool.LogFile, 10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func pidFromFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// pgpool ends its pid with a NUL byte, not a newline.
	pid, _ := strconv.Atoi(strings.Trim(string(data), " \t\r\n\x00"))
	if pid <= 0 || !alive(pid) {
		return 0
	}
	return pid
}

func dialUnixOK(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// AddPoolerAlias makes the database alias of the running PgBouncer called
// name lead to database dbname of the server it pools, as a line
// "alias = host=… port=… dbname=…" of its [databases] section does, and
// reloads it: a client that asks for alias is served by dbname, and the
// server calls the session's database dbname. It returns once the pooler
// has logged the reload. ReconfigurePooler rewrites the configuration from
// the spec, which has no aliases, and so drops them.
func (l *Lab) AddPoolerAlias(name, alias, dbname string) error {
	p := l.Pooler(name)
	if p == nil {
		return fmt.Errorf("no pooler %q in this lab", name)
	}
	if !isFrontDoorName(alias) || !isFrontDoorName(dbname) {
		return fmt.Errorf("pooler alias %q for %q: use 1 to 40 letters, digits, '_', '.' or '-', starting with a letter or digit", alias, dbname)
	}
	pid := PoolerPID(p)
	if pid == 0 {
		return fmt.Errorf("pooler %s is not running", name)
	}
	before := strings.Count(readFile(p.LogFile), "got SIGHUP")
	if err := appendFile(p.ConfigFile, fmt.Sprintf("\n[databases]\n%s = host=127.0.0.1 port=%d dbname=%s\n", alias, l.poolerTarget(), dbname)); err != nil {
		return err
	}
	if err := sendSignal(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload pooler %s: %w", name, err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(readFile(p.LogFile), "got SIGHUP") == before; {
		if time.Now().After(deadline) {
			return fmt.Errorf("pooler %s did not log the reload within 10s\n%s", name, tail(p.LogFile, 10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
