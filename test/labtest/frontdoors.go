package labtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// Front doors are what a client may find between itself and the primary
// besides PgBouncer: pgpool-II load-balancing reads to the standby, HAProxy
// in TCP mode, nginx's stream (TCP) proxy, and a local unix-socket relay
// such as the Cloud SQL Auth Proxy serves. Each runs as the server OS user,
// in a session of its own, from a directory of the lab's run dir, with its
// output in a log file there, and is stopped by [lab.Lab.Stop].

// Spec says which front doors a lab gets.
type Spec struct {
	// PgPool, when set, starts pgpool-II in front of the primary and the
	// standby, with load balancing on; it needs a lab with a standby, or
	// Mode NativeReplication.
	PgPool *PgPoolSpec
	// HAProxy are HAProxy instances in TCP mode to start, each in front of
	// the servers its spec names.
	HAProxy []HAProxySpec
	// Nginx are nginx instances (its stream module: a TCP proxy) to start,
	// each in front of the servers its spec names.
	Nginx []NginxSpec
	// Relays are the names of socat relays to start: unix sockets that
	// forward to the primary's TCP port.
	Relays []string
}

// FrontDoors are the front doors of one lab, a [lab.Extension]: give it to
// lab.Options.Extensions, and once the lab runs its fields and methods tell
// where each front door listens. In an HA lab they point at the nodes as
// they were at start.
type FrontDoors struct {
	// PgPool is the lab's pgpool-II; nil when it has none.
	PgPool *PgPool `json:"pgpool,omitempty"`
	// HAProxies are the lab's HAProxy instances.
	HAProxies []HAProxy `json:"haproxy,omitempty"`
	// Nginxes are the lab's nginx instances.
	Nginxes []Nginx `json:"nginx,omitempty"`
	// Relays are the lab's socat relays.
	Relays []Relay `json:"relays,omitempty"`

	spec                                      Spec
	lab                                       *lab.Lab
	pgpoolBin, haproxyBin, nginxBin, socatBin string
	// nginxModule is the stream module nginx needs loaded; empty when it
	// is built in.
	nginxModule string
}

// name is the FrontDoors' key in lab.json.
const name = "frontdoors"

// New returns the front doors of spec, for one lab's Options.Extensions.
func New(spec Spec) *FrontDoors { return &FrontDoors{spec: spec} }

// Start starts a lab with opts and the front doors of spec.
func Start(ctx context.Context, opts lab.Options, spec Spec) (*lab.Lab, *FrontDoors, error) {
	d := New(spec)
	opts.Extensions = append(opts.Extensions[:len(opts.Extensions):len(opts.Extensions)], d)
	l, err := lab.Start(ctx, opts)
	return l, d, err
}

// Load reads the lab kept in dir, as lab.Load does, with its front doors
// attached again from lab.json: Stop then shuts each down as the lab that
// started them would (pgpool-II through its main process, which alone
// removes its shared memory), and Status reports them.
func Load(dir string) (*lab.Lab, *FrontDoors, error) {
	l, err := lab.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	d := &FrontDoors{lab: l}
	raw, ok := l.ExtensionState[name]
	if !ok {
		return l, d, nil
	}
	if err := json.Unmarshal(raw, d); err != nil {
		return nil, nil, fmt.Errorf("the front doors in %s: %w", dir, err)
	}
	return l, d, l.Attach(d)
}

// Name is the FrontDoors' key in lab.json.
func (d *FrontDoors) Name() string { return name }

// Check refuses front doors that cannot work in a lab with opts, and
// finds their programs: pgpool (Debian package pgpool2) for PgPool,
// haproxy for HAProxy, nginx and its stream module (libnginx-mod-stream)
// for Nginx, and socat for Relays, and only those.
func (d *FrontDoors) Check(opts lab.Options) (int, error) {
	if d.lab != nil {
		return 0, errors.New("these front doors serve a lab already: make new ones (labtest.New) for each lab")
	}
	if err := checkSpec(d.spec, opts); err != nil {
		return 0, err
	}
	var err error
	if d.spec.PgPool != nil {
		if d.pgpoolBin, err = lab.FindProgram("pgpool", "pgpool2", pgPoolDirs); err != nil {
			return 0, err
		}
	}
	if len(d.spec.HAProxy) > 0 {
		if d.haproxyBin, err = lab.FindProgram("haproxy", "haproxy", haproxyDirs); err != nil {
			return 0, err
		}
	}
	if len(d.spec.Nginx) > 0 {
		if d.nginxBin, err = lab.FindProgram("nginx", "nginx", nginxDirs); err != nil {
			return 0, err
		}
		if d.nginxModule, err = findStreamModule(d.nginxBin); err != nil {
			return 0, err
		}
	}
	if len(d.spec.Relays) > 0 {
		if d.socatBin, err = lab.FindProgram("socat", "socat", socatDirs); err != nil {
			return 0, err
		}
	}
	n := len(d.spec.HAProxy) + len(d.spec.Nginx)
	if d.spec.PgPool != nil {
		n++
	}
	if d.spec.needsTwin() {
		n++ // the twin's, the last one
	}
	return n, nil
}

// Where the front doors' programs are looked for before PATH.
var (
	pgPoolDirs  = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/opt/homebrew/bin", "/usr/local/bin"}
	haproxyDirs = pgPoolDirs
	socatDirs   = []string{"/usr/bin", "/usr/sbin", "/opt/homebrew/bin", "/usr/local/bin"}
)

// Start starts the twin when a front door needs it, then pgpool-II, the
// relays, the HAProxy instances and the nginx instances, on the given
// ports. Each process is recorded in d as soon as it runs, so that Stop
// ends it whatever happens next.
func (d *FrontDoors) Start(ctx context.Context, l *lab.Lab, ports []int, password string) error {
	d.lab = l
	var twin *lab.Server
	if d.spec.needsTwin() {
		t, err := d.startTwin(ctx, ports[len(ports)-1], password)
		if err != nil {
			return err
		}
		twin, ports = t, ports[:len(ports)-1]
	}
	if d.spec.PgPool != nil {
		if err := d.startPgPool(ctx, *d.spec.PgPool, ports[0], password, twin); err != nil {
			return err
		}
		ports = ports[1:]
	}
	for _, name := range d.spec.Relays {
		if err := d.startRelay(ctx, name); err != nil {
			return err
		}
	}
	for i, spec := range d.spec.HAProxy {
		if err := d.startHAProxy(ctx, spec, ports[i], twin); err != nil {
			return err
		}
	}
	ports = ports[len(d.spec.HAProxy):]
	for i, spec := range d.spec.Nginx {
		if err := d.startNginx(ctx, spec, ports[i], twin); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the relays, the HAProxy and nginx instances and pgpool-II,
// and then the twin.
func (d *FrontDoors) Stop() []error {
	if d.lab == nil {
		return nil // never started
	}
	var errs []error
	for i := range d.Relays {
		if pid := RelayPID(&d.Relays[i]); pid > 0 {
			errs = append(errs, lab.StopGroup(pid, syscall.SIGTERM, 5*time.Second))
		}
	}
	for i := range d.HAProxies {
		if pid := HAProxyPID(&d.HAProxies[i]); pid > 0 {
			// SIGTERM is HAProxy's hard stop; SIGUSR1 would wait for the
			// sessions to end.
			errs = append(errs, lab.StopGroup(pid, syscall.SIGTERM, 5*time.Second))
		}
	}
	for i := range d.Nginxes {
		if pid := NginxPID(&d.Nginxes[i]); pid > 0 {
			// SIGTERM is nginx's fast shutdown, which closes the
			// sessions; SIGQUIT would wait for them to end. The group
			// is the master and its workers.
			errs = append(errs, lab.StopGroup(pid, syscall.SIGTERM, 5*time.Second))
		}
	}
	if d.PgPool != nil {
		if pid := PgPoolPID(d.PgPool); pid > 0 {
			// SIGINT is pgpool's fast shutdown; SIGTERM would wait for
			// the clients to leave.
			// Its main process waits for every child to exit, which
			// can take seconds on a loaded machine: give it time, as
			// only its own shutdown removes its shared memory. When it
			// had to be killed, remove what it left.
			errs = append(errs, lab.StopGroup(pid, syscall.SIGINT, 15*time.Second))
			errs = append(errs, lab.RemoveOrphanedShmOf(pid))
		}
	}
	return append(errs, d.stopTwin()...)
}

// Status reports each front door's process, as lab.Lab.Status does.
func (d *FrontDoors) Status() []lab.Component {
	var out []lab.Component
	add := func(name, kind string, port, pid int) {
		out = append(out, lab.Component{Name: name, Kind: kind, Port: port, PID: pid, Up: pid > 0 && lab.DialOK(port)})
	}
	if d.PgPool != nil {
		add("pgpool", "pgpool-II", d.PgPool.Port, PgPoolPID(d.PgPool))
	}
	for i := range d.HAProxies {
		h := &d.HAProxies[i]
		add(h.Name, "haproxy "+h.Balance, h.Port, HAProxyPID(h))
	}
	for i := range d.Nginxes {
		n := &d.Nginxes[i]
		add(n.Name, "nginx "+n.policyName(), n.Port, NginxPID(n))
	}
	for i := range d.Relays {
		r := &d.Relays[i]
		pid := RelayPID(r)
		out = append(out, lab.Component{Name: r.Name, Kind: "socat relay", Port: r.Port, Socket: r.Socket, PID: pid, Up: pid > 0 && dialUnixOK(r.Socket)})
	}
	return append(out, d.twinStatus()...)
}

// Alive reports whether any front door's process still runs.
func (d *FrontDoors) Alive() bool {
	if d.PgPool != nil && PgPoolPID(d.PgPool) > 0 {
		return true
	}
	for i := range d.HAProxies {
		if HAProxyPID(&d.HAProxies[i]) > 0 {
			return true
		}
	}
	for i := range d.Nginxes {
		if NginxPID(&d.Nginxes[i]) > 0 {
			return true
		}
	}
	for i := range d.Relays {
		if RelayPID(&d.Relays[i]) > 0 {
			return true
		}
	}
	return d.twinAlive()
}

// AddLogin gives pgpool-II the password of an extra login role and has it
// reload, waiting until its main process has.
func (d *FrontDoors) AddLogin(role, password string) error {
	if d.PgPool == nil {
		return nil
	}
	if err := lab.AppendFile(filepath.Join(filepath.Dir(d.PgPool.ConfigFile), "pool_passwd"), poolPasswdLine(role, password)); err != nil {
		return err
	}
	pid := PgPoolPID(d.PgPool)
	if pid == 0 {
		return nil
	}
	const reloaded = "reload config files"
	before := strings.Count(readFile(d.PgPool.LogFile), reloaded)
	if err := lab.Signal(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload pgpool-II: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(readFile(d.PgPool.LogFile), reloaded) == before; {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgpool-II did not log the reload within 10s\n%s", lab.LogTail(d.PgPool.LogFile, 10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// PgPoolSpec asks for pgpool-II in front of the primary and the standby,
// with load balancing on: a SELECT that calls no volatile function may be
// answered by the standby, while writes and volatile functions (among them
// pg_try_advisory_lock and pg_is_in_recovery) go to the primary.
type PgPoolSpec struct {
	// Mode is pgpool's clustering mode: empty for streaming replication
	// over the primary and its standby, NativeReplication, where pgpool
	// itself writes to the primary and the twin (a second, unrelated
	// primary; see Twin), or Raw, over the primary and the twin, where
	// every statement goes to the primary. The last two need no standby.
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
	Twin *lab.Server `json:"twin,omitempty"`
}

// NativeReplication is the PgPoolSpec.Mode in which pgpool-II replicates
// writes itself, to every backend: each is a writable primary.
const NativeReplication = "native_replication"

// Raw is the PgPoolSpec.Mode in which pgpool-II sends every statement to
// the first backend that is up, the primary, and keeps the twin as the
// node it fails over to; it balances nothing.
const Raw = "raw"

// twinMode reports whether pgpool in mode runs over the primary and the
// twin, rather than the primary and its standby.
func twinMode(mode string) bool { return mode == NativeReplication || mode == Raw }

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
	Twin *lab.Server `json:"twin,omitempty"`
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
// or '-', starting with a letter or digit.
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

// checkSpec rejects front doors that cannot work in a lab with opts,
// before Start starts anything.
func checkSpec(spec Spec, opts lab.Options) error {
	if spec.PgPool != nil {
		switch spec.PgPool.Mode {
		case "":
			if !opts.Standby {
				return errors.New("lab options: PgPool needs a standby to balance reads to (set Standby: true), or Mode NativeReplication")
			}
		case NativeReplication, Raw:
		default:
			return fmt.Errorf("lab options: PgPool Mode %q: use \"\" (streaming replication over primary and standby), %q or %q", spec.PgPool.Mode, NativeReplication, Raw)
		}
	}
	seen := map[string]bool{}
	for _, h := range spec.HAProxy {
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
	if err := checkNginx(spec.Nginx, spec.HAProxy, opts); err != nil {
		return err
	}
	seen = map[string]bool{}
	for _, name := range spec.Relays {
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
