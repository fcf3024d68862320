package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/errkind"
)

// PoolMode is a PgBouncer pool_mode.
type PoolMode string

// The pool modes PgBouncer offers.
const (
	Transaction PoolMode = "transaction"
	Session     PoolMode = "session"
	Statement   PoolMode = "statement"
)

// PoolerSpec describes one PgBouncer instance of a lab.
type PoolerSpec struct {
	// Name identifies the pooler in DSN lookups and in `lab env`.
	Name string `json:"name"`
	// Mode is the pool_mode.
	Mode PoolMode `json:"mode"`
	// PoolSize is default_pool_size: server connections per user and database.
	PoolSize int `json:"pool_size"`
	// Settings are further [pgbouncer] settings, which win over the lab's
	// own: for example "server_reset_query" set to "" (none).
	Settings map[string]string `json:"settings,omitempty"`
	// ServerSocket makes PgBouncer reach the primary by its unix socket,
	// while its clients still use TCP: the server then sees a unix-socket
	// client for a client that is not. Not in an HA lab, whose poolers
	// reach the primary through a TCP router.
	ServerSocket bool `json:"server_socket,omitempty"`
}

// DefaultPoolers are what `leasectl lab up` starts: PgBouncer in transaction
// mode (the trap) and in session mode (safe), each with a pool of 20.
var DefaultPoolers = []PoolerSpec{
	{Name: "transaction", Mode: Transaction, PoolSize: 20},
	{Name: "session", Mode: Session, PoolSize: 20},
}

// EveryPoolMode is a pooler in each pool mode, plus pools of one, for tests
// that probe every way of reaching the server: "transaction" (pool 20),
// "tx1" (transaction, pool 1), "session" (pool 20), "session1" (session,
// pool 1) and "statement" (pool 5).
var EveryPoolMode = []PoolerSpec{
	{Name: "transaction", Mode: Transaction, PoolSize: 20},
	{Name: "tx1", Mode: Transaction, PoolSize: 1},
	{Name: "session", Mode: Session, PoolSize: 20},
	{Name: "session1", Mode: Session, PoolSize: 1},
	{Name: "statement", Mode: Statement, PoolSize: 5},
}

// Options configure [Start].
type Options struct {
	// Dir keeps lab.json and the pgpass file. Empty means a new temporary
	// directory, removed by Stop.
	Dir string
	// Poolers to start; nil means DefaultPoolers, an empty non-nil slice none.
	Poolers []PoolerSpec
	// Standby adds a streaming hot standby of the primary. An HA lab has
	// one in any case: node2.
	Standby bool
	// Settings are extra postgresql.conf lines for primary and standby; they
	// win over the lab's own (listen_addresses, for example).
	Settings map[string]string
	// HBA are extra pg_hba.conf lines for primary and standby, e.g. to admit
	// clients from a network namespace: "host all all 10.0.0.0/8 scram-sha-256".
	HBA []string
	// Extensions are further parts of the lab, started after the servers
	// and poolers and stopped before them (see [Extension]); the test
	// front doors of test/labtest are some.
	Extensions []Extension
	// HA, when set, starts a high-availability cluster instead of a primary
	// the lab runs itself: etcd, two PostgreSQL nodes managed by Patroni
	// (node1 the primary, node2 its streaming replica) and HAProxy routing
	// by Patroni's health checks; see [HASpec]. Standby is implied, the
	// poolers connect through HAProxy's primary listener, and extensions
	// see the nodes as they were at start. Settings reach
	// both nodes through Patroni, except listen_addresses and port, which
	// Patroni sets on the command line.
	HA *HASpec
	// Log receives one line per step; nil discards them.
	Log io.Writer
}

// Server is one PostgreSQL instance of a lab.
type Server struct {
	Port      int    `json:"port"`
	DataDir   string `json:"data_dir"`
	SocketDir string `json:"socket_dir"`
	LogFile   string `json:"log_file"`
}

// Pooler is one running PgBouncer instance of a lab.
type Pooler struct {
	PoolerSpec
	Port       int    `json:"port"`
	ConfigFile string `json:"config_file"`
	PIDFile    string `json:"pid_file"`
	LogFile    string `json:"log_file"`
}

// Lab is a running throwaway PostgreSQL cluster with its poolers and
// extensions.
type Lab struct {
	// Dir keeps lab.json and the pgpass file.
	Dir string `json:"dir"`
	// RunDir holds the servers' files; the server OS user owns it.
	RunDir string `json:"run_dir"`
	// OwnsDir says whether Stop removes Dir too.
	OwnsDir bool `json:"owns_dir"`
	// User is the database superuser.
	User string `json:"user"`
	// OSUser is the operating-system user the servers run as.
	OSUser string `json:"os_user"`
	// PassFile is the pgpass file that every DSN names.
	PassFile string `json:"pass_file"`
	// Version is the output of `postgres --version`.
	Version string `json:"version"`
	// PoolerVersion is the first line of `pgbouncer --version`.
	PoolerVersion string `json:"pooler_version"`
	// Binaries used by this lab.
	Bin      Binaries          `json:"binaries"`
	Primary  Server            `json:"primary"`
	Standby  *Server           `json:"standby,omitempty"`
	Poolers  []Pooler          `json:"poolers"`
	Settings map[string]string `json:"settings,omitempty"`
	HBA      []string          `json:"hba,omitempty"`
	// HA is the lab's etcd, Patroni nodes and HAProxy; nil unless started
	// with Options.HA. In an HA lab, Primary and Standby are copies of the
	// nodes' Servers: Primary is the node that was the primary when the lab
	// last changed it or looked (Start, Switchover, KillPrimary), Standby
	// the other one, which is dead after KillPrimary until ReviveNode. A
	// failover that Patroni makes on its own does not change them: ask
	// HAPrimary which node is the primary now.
	HA *HA `json:"ha,omitempty"`
	// Ports are the loopback ports this lab reserved for its servers,
	// poolers and extensions (see reservePorts); Stop releases them.
	Ports []int `json:"ports,omitempty"`
	// ExtensionState is the state of each extension by name, as the lab
	// last saved it; see [Lab.Attach].
	ExtensionState map[string]json.RawMessage `json:"extensions,omitempty"`

	cred *credential
	log  io.Writer
	ext  []Extension
}

// credential is the OS user that the servers run as when it is not the
// caller (see serverCredential).
type credential struct{ uid, gid int }

const stateFile = "lab.json"

// ErrNoLab is returned by [Load] when no lab state exists in a directory.
var ErrNoLab = errkind.New(errkind.Input, "no lab here")

// ErrUnsupported is returned by [Start] and [Load] on a system where the
// lab cannot run: see [Support].
var ErrUnsupported = errkind.New(errkind.Input, "the lab needs Linux or macOS (PostgreSQL and PgBouncer started as local processes)")

// AlreadyRunningError is returned by Start when Dir holds a live lab.
type AlreadyRunningError struct{ Dir string }

func (e *AlreadyRunningError) Error() string {
	return fmt.Sprintf("a lab is already running in %s", e.Dir)
}

// DefaultDir is the state directory of `leasectl lab` when --dir is not
// given: leasectl/lab under the user's cache directory.
func DefaultDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "leasectl", "lab")
}

// Start creates and starts a lab. On failure everything it started is
// stopped and removed again.
func Start(ctx context.Context, opts Options) (l *Lab, err error) {
	if err := Support(); err != nil {
		return nil, err
	}
	if opts.HA != nil {
		if err := checkHA(*opts.HA); err != nil {
			return nil, err
		}
		opts.Standby = true // node2, for extensions that need a standby
	}
	extPorts, err := checkExtensions(opts)
	if err != nil {
		return nil, err
	}
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if opts.HA != nil {
		if err := findHABinaries(&bin); err != nil {
			return nil, err
		}
	}
	cred, osUser, err := serverCredential()
	if err != nil {
		return nil, err
	}
	l = &Lab{User: "postgres", OSUser: osUser, Bin: bin, Settings: opts.Settings, HBA: opts.HBA, cred: cred, log: opts.Log,
		ext: append([]Extension(nil), opts.Extensions...)}
	if l.log == nil {
		l.log = io.Discard
	}
	if opts.Dir != "" {
		if old, lerr := Load(opts.Dir); lerr == nil {
			if old.anyAlive() {
				return nil, &AlreadyRunningError{Dir: opts.Dir}
			}
			_ = old.Stop(ctx) // leftovers of a lab whose servers died: clean them up
		}
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("create lab dir: %w", err)
		}
		l.Dir = opts.Dir
	}
	if l.RunDir, err = os.MkdirTemp("", "leasectl-lab-"); err != nil {
		return nil, fmt.Errorf("create lab run dir: %w", err)
	}
	if l.Dir == "" {
		l.Dir, l.OwnsDir = l.RunDir, true
	}
	defer func() {
		if err != nil {
			_ = l.Stop(context.WithoutCancel(ctx))
			l = nil
		}
	}()
	if err := l.chown(l.RunDir); err != nil {
		return l, err
	}
	password, err := randomPassword()
	if err != nil {
		return l, err
	}
	l.PassFile = filepath.Join(l.Dir, "pgpass")
	if err := os.WriteFile(l.PassFile, []byte(pgpassLine(l.User, password)), 0o600); err != nil {
		return l, fmt.Errorf("write pgpass: %w", err)
	}
	if out, err := exec.CommandContext(ctx, bin.Postgres, "--version").Output(); err == nil {
		l.Version = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, bin.PgBouncer, "--version").Output(); err == nil {
		l.PoolerVersion = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}

	nPoolers, nHA := len(poolerSpecs(opts)), 0
	if opts.HA != nil {
		nHA = haPorts
	}
	nExt := 0
	for _, n := range extPorts {
		nExt += n
	}
	ports, err := reservePorts(l.RunDir, 2+nPoolers+nExt+nHA)
	if err != nil {
		return l, err
	}
	l.Ports = ports
	haPortList := ports[len(ports)-nHA:]
	ports = ports[:len(ports)-nHA]
	if opts.HA != nil {
		if err := l.startHA(ctx, *opts.HA, [2]int{ports[0], ports[1]}, haPortList, password); err != nil {
			return l, err
		}
	} else {
		l.Primary = l.NewServer("primary", ports[0])
		if err := l.initPrimary(ctx, password); err != nil {
			return l, err
		}
		if err := l.save(); err != nil { // from here on `lab down` can clean up
			return l, err
		}
		if err := l.startServer(ctx, &l.Primary); err != nil {
			return l, err
		}
	}
	if opts.Standby && opts.HA == nil {
		sb := l.NewServer("standby", ports[1])
		l.Standby = &sb
		if err := l.initStandby(ctx); err != nil {
			return l, err
		}
		if err := l.startServer(ctx, l.Standby); err != nil {
			return l, err
		}
	}
	for i, spec := range poolerSpecs(opts) {
		p, err := l.startPooler(ctx, spec, ports[2+i], password)
		if p != nil {
			l.Poolers = append(l.Poolers, *p)
		}
		if err != nil {
			return l, err
		}
	}
	if err := l.startExtensions(ctx, extPorts, ports[2+nPoolers:], password); err != nil {
		return l, err
	}
	return l, l.save()
}

func poolerSpecs(opts Options) []PoolerSpec {
	if opts.Poolers == nil {
		return DefaultPoolers
	}
	return opts.Poolers
}

// HasState reports whether dir holds a file where a lab keeps its state,
// valid or not.
func HasState(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, stateFile))
	return err == nil
}

// Load reads the state of the lab kept in dir. It returns an error wrapping
// ErrNoLab when there is none.
func Load(dir string) (*Lab, error) {
	if err := Support(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("%w: no %s in %s", ErrNoLab, stateFile, dir)
	}
	if err != nil {
		return nil, err
	}
	l := &Lab{}
	if err := json.Unmarshal(data, l); err != nil {
		// Not a lab's state: nothing here can be stopped or used.
		return nil, fmt.Errorf("%w: %s is not a lab's state file (%v); name the directory of a lab, or remove the file and start one there",
			ErrNoLab, filepath.Join(dir, stateFile), err)
	}
	l.log = io.Discard
	if l.cred, _, err = serverCredential(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Lab) save() error {
	if err := l.saveExtensions(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.Dir, stateFile), append(data, '\n'), 0o600)
}

// SetLog sends the lab's progress lines (one per step, as Options.Log
// does for Start) to w; nil discards them. A lab from Load discards them
// until told otherwise.
func (l *Lab) SetLog(w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	l.log = w
}

// Logf writes one progress line to the lab's log (see Options.Log).
func (l *Lab) Logf(format string, args ...any) {
	fmt.Fprintf(l.log, format+"\n", args...)
}

// ---- DSNs ----

// DSN returns a password-free URL DSN for user and database on a loopback
// port; the password comes from the lab's pgpass file.
func (l *Lab) DSN(port int, user, dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&passfile=%s",
		url.PathEscape(user), port, url.PathEscape(dbname), url.QueryEscape(l.PassFile))
}

// DirectDSN is the primary over TCP, as the superuser.
func (l *Lab) DirectDSN() string { return l.DSN(l.Primary.Port, l.User, "postgres") }

// SocketDSN is the primary over its unix socket, as the superuser.
func (l *Lab) SocketDSN() string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable passfile=%s",
		l.Primary.SocketDir, l.Primary.Port, l.User, l.PassFile)
}

// MultiHostDSN names the primary and then the standby, with
// target_session_attrs=primary: what a lease DSN looks like in front of an
// HA pair. Empty when the lab has no standby.
func (l *Lab) MultiHostDSN() string {
	if l.Standby == nil {
		return ""
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=primary&passfile=%s",
		url.PathEscape(l.User), l.Primary.Port, l.Standby.Port, url.QueryEscape(l.PassFile))
}

// StandbyDSN is the hot standby over TCP; empty when the lab has none.
func (l *Lab) StandbyDSN() string {
	if l.Standby == nil {
		return ""
	}
	return l.DSN(l.Standby.Port, l.User, "postgres")
}

// PoolerDSN is the named pooler; empty when the lab has no such pooler.
func (l *Lab) PoolerDSN(name string) string {
	if p := l.Pooler(name); p != nil {
		return l.DSN(p.Port, l.User, "postgres")
	}
	return ""
}

// Pooler returns the named pooler, or nil.
func (l *Lab) Pooler(name string) *Pooler {
	for i := range l.Poolers {
		if l.Poolers[i].Name == name {
			return &l.Poolers[i]
		}
	}
	return nil
}

// Password returns the superuser's password, read from the pgpass file. Tests
// use it to build DSNs that carry a password on purpose.
func (l *Lab) Password() (string, error) {
	return passwordFor(l.PassFile, l.User)
}

// ---- servers ----

// NewServer is the Server called name of the lab's run dir, on port: its
// data directory, socket directory and log file do not depend on the port.
func (l *Lab) NewServer(name string, port int) Server {
	return Server{
		Port:      port,
		DataDir:   filepath.Join(l.RunDir, name),
		SocketDir: filepath.Join(l.RunDir, "sock-"+name),
		LogFile:   filepath.Join(l.RunDir, name+".log"),
	}
}

func (l *Lab) initPrimary(ctx context.Context, password string) error {
	l.Logf("initdb %s", l.Primary.DataDir)
	return l.InitServer(ctx, &l.Primary, password)
}

// InitServer creates s, a server of the lab's run dir (see NewServer),
// with initdb as the primary is created: the same superuser and password,
// trust on the unix socket and SCRAM over TCP, and the lab's settings.
func (l *Lab) InitServer(ctx context.Context, s *Server, password string) error {
	pwfile := filepath.Join(l.RunDir, "pwfile-"+filepath.Base(s.DataDir))
	if err := l.WriteFile(pwfile, password+"\n"); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if _, err := l.Run(ctx, l.Bin.Initdb, "-D", s.DataDir, "-U", l.User, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return err
	}
	return l.writeServerConf(s)
}

func (l *Lab) initStandby(ctx context.Context) error {
	l.Logf("pg_basebackup -R %s", l.Standby.DataDir)
	if _, err := l.Run(ctx, l.Bin.PgBasebackup, "-h", l.Primary.SocketDir, "-p", strconv.Itoa(l.Primary.Port),
		"-U", l.User, "-D", l.Standby.DataDir, "-R", "-X", "stream", "--no-sync", "-c", "fast"); err != nil {
		return err
	}
	return l.writeServerConf(l.Standby)
}

// writeServerConf appends the lab's settings to postgresql.conf. For a
// standby made by pg_basebackup it overrides the copied port and socket.
func (l *Lab) writeServerConf(s *Server) error {
	if err := os.MkdirAll(s.SocketDir, 0o700); err != nil {
		return err
	}
	if err := l.chown(s.SocketDir); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("\n# leasectl lab\n")
	settings := [][2]string{
		{"listen_addresses", "'127.0.0.1'"},
		{"port", strconv.Itoa(s.Port)},
		{"unix_socket_directories", "'" + s.SocketDir + "'"},
		{"max_connections", "300"},
		{"max_prepared_transactions", "20"},
		{"max_locks_per_transaction", "128"},
		{"shared_buffers", "32MB"},
		{"fsync", "off"},
		{"synchronous_commit", "off"},
		{"full_page_writes", "off"},
		{"wal_level", "replica"},
		{"max_wal_senders", "5"},
		{"hot_standby", "on"},
		{"logging_collector", "off"},
		{"log_min_messages", "warning"},
		{"log_connections", "off"},
	}
	for _, kv := range settings {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	for k, v := range l.Settings {
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	if err := AppendFile(filepath.Join(s.DataDir, "postgresql.conf"), b.String()); err != nil {
		return err
	}
	if len(l.HBA) == 0 {
		return nil
	}
	return AppendFile(filepath.Join(s.DataDir, "pg_hba.conf"), "\n# leasectl lab\n"+strings.Join(l.HBA, "\n")+"\n")
}

// AppendFile appends text to the file at path, which must exist (a
// configuration file the lab or a front door wrote).
func AppendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func (l *Lab) startServer(ctx context.Context, s *Server) error {
	l.Logf("start postgres on 127.0.0.1:%d", s.Port)
	if _, err := l.Run(ctx, l.Bin.PgCtl, "start", "-D", s.DataDir, "-l", s.LogFile, "-w", "-t", "60", "-s"); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(s.LogFile, 15))
	}
	return nil
}

// StopServer stops a server of the lab with pg_ctl's mode ("smart", "fast"
// or "immediate") and waits until it is gone. In an HA lab the node's
// Patroni starts it again: use KillNode to take a node down.
func (l *Lab) StopServer(ctx context.Context, s *Server, mode string) error {
	_, err := l.Run(ctx, l.Bin.PgCtl, "stop", "-D", s.DataDir, "-m", mode, "-w", "-t", "30", "-s")
	return err
}

// StartServer starts a stopped server of the lab again and waits until it
// accepts connections.
func (l *Lab) StartServer(ctx context.Context, s *Server) error {
	return l.startServer(ctx, s)
}

// RestartPrimary restarts the primary with pg_ctl's stop mode ("fast" or
// "immediate"), ending every session on it. An HA lab refuses: Patroni
// manages its servers (use Switchover, KillPrimary or KillNode).
func (l *Lab) RestartPrimary(ctx context.Context, mode string) error {
	if l.HA != nil {
		return errors.New("in an HA lab Patroni manages the servers, and pg_ctl behind its back would fight it: use Switchover, KillPrimary or KillNode")
	}
	if err := l.StopServer(ctx, &l.Primary, mode); err != nil {
		return err
	}
	return l.startServer(ctx, &l.Primary)
}

// Promote turns the standby into a primary and waits for it. An HA lab
// refuses: use Switchover, which has Patroni promote the other node.
func (l *Lab) Promote(ctx context.Context) error {
	if l.HA != nil {
		return errors.New("in an HA lab Patroni manages the servers, and a promotion behind its back would make two primaries: use Switchover or KillPrimary")
	}
	if l.Standby == nil {
		return errors.New("this lab has no standby")
	}
	_, err := l.Run(ctx, l.Bin.PgCtl, "promote", "-D", l.Standby.DataDir, "-w", "-t", "60", "-s")
	return err
}

// ServerPID returns the postmaster pid of s from postmaster.pid, or 0 when
// it is not running.
func ServerPID(s *Server) int {
	if s.DataDir == "" {
		return 0 // a lab that failed before it made this server
	}
	data, err := os.ReadFile(filepath.Join(s.DataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if pid <= 0 || !alive(pid) {
		return 0
	}
	return pid
}

// ---- poolers ----

func (l *Lab) startPooler(ctx context.Context, spec PoolerSpec, port int, password string) (*Pooler, error) {
	if spec.PoolSize <= 0 {
		spec.PoolSize = 20
	}
	dir := filepath.Join(l.RunDir, "pgbouncer-"+spec.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := l.chown(dir); err != nil {
		return nil, err
	}
	p := &Pooler{
		PoolerSpec: spec,
		Port:       port,
		ConfigFile: filepath.Join(dir, "pgbouncer.ini"),
		PIDFile:    filepath.Join(dir, "pgbouncer.pid"),
		LogFile:    filepath.Join(dir, "pgbouncer.log"),
	}
	if err := l.WriteFile(filepath.Join(dir, "userlist.txt"), userlistLine(l.User, password)); err != nil {
		return nil, err
	}
	if err := l.WriteFile(p.ConfigFile, l.poolerINI(p)); err != nil {
		return nil, err
	}
	l.Logf("start pgbouncer %s (pool_mode=%s, pool_size=%d) on 127.0.0.1:%d", spec.Name, spec.Mode, spec.PoolSize, port)
	if _, err := l.Run(ctx, l.Bin.PgBouncer, "-d", p.ConfigFile); err != nil {
		return p, fmt.Errorf("%w\n%s", err, tail(p.LogFile, 15))
	}
	if err := waitTCP(ctx, port, 15*time.Second); err != nil {
		return p, fmt.Errorf("pgbouncer %s did not open port %d: %w\n%s", spec.Name, port, err, tail(p.LogFile, 15))
	}
	return p, nil
}

// PoolerTarget is the port the poolers connect to: the primary's, or in an
// HA lab HAProxy's primary listener, so that they follow a failover.
func (l *Lab) PoolerTarget() int {
	if l.HA != nil {
		return l.HA.Router.PrimaryPort
	}
	return l.Primary.Port
}

// poolerINI renders p's pgbouncer.ini.
func (l *Lab) poolerINI(p *Pooler) string {
	dir := filepath.Dir(p.ConfigFile)
	host := "127.0.0.1"
	if p.ServerSocket && l.HA == nil {
		host = l.Primary.SocketDir
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 1000
max_db_connections = 0
ignore_startup_parameters = extra_float_digits
pidfile = %s
logfile = %s
log_connections = 0
log_disconnections = 0
`, host, l.PoolerTarget(), p.Port, filepath.Join(dir, "userlist.txt"), l.User, p.Mode, p.PoolSize, p.PIDFile, p.LogFile)
	keys := make([]string, 0, len(p.Settings))
	for k := range p.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ini += k + " = " + p.Settings[k] + "\n"
	}
	return ini
}

// ReconfigurePooler changes the spec of the running pooler called name
// (pool mode, pool size, settings), rewrites its configuration and reloads
// it with SIGHUP, as an operator would: the pooler keeps running and its
// clients stay connected. It returns once the pooler has logged the reload.
func (l *Lab) ReconfigurePooler(name string, change func(*PoolerSpec)) error {
	return l.ReloadPooler(name, func(p *Pooler) error {
		change(&p.PoolerSpec)
		if p.PoolSize <= 0 {
			p.PoolSize = 20
		}
		if err := l.WriteFile(p.ConfigFile, l.poolerINI(p)); err != nil {
			return err
		}
		if err := l.save(); err != nil {
			return err
		}
		l.Logf("reload pgbouncer %s (pool_mode=%s, pool_size=%d)", p.Name, p.Mode, p.PoolSize)
		return nil
	})
}

// ReloadPooler has edit change the files of the running pooler called name
// and then reloads it with SIGHUP, returning once the pooler has logged
// the reload.
func (l *Lab) ReloadPooler(name string, edit func(*Pooler) error) error {
	p := l.Pooler(name)
	if p == nil {
		return fmt.Errorf("no pooler %q in this lab", name)
	}
	pid := PoolerPID(p)
	if pid == 0 {
		return fmt.Errorf("pooler %s is not running", name)
	}
	before := strings.Count(readFile(p.LogFile), "got SIGHUP")
	if err := edit(p); err != nil {
		return err
	}
	if err := Signal(pid, syscall.SIGHUP); err != nil {
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

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// PoolerPID returns the pid of a running pooler, or 0.
func PoolerPID(p *Pooler) int {
	data, err := os.ReadFile(p.PIDFile)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid <= 0 || !alive(pid) {
		return 0
	}
	return pid
}

// ---- roles ----

// AddLogin records the password of an extra login role in the pgpass file,
// in every pooler's auth file and in each extension (pgpool-II's
// pool_passwd, say), so that DSNs for that role work. The role itself is created with SQL by the caller.
func (l *Lab) AddLogin(role, password string) error {
	f, err := os.OpenFile(l.PassFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(pgpassLine(role, password)); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range l.Poolers {
		ul := filepath.Join(filepath.Dir(p.ConfigFile), "userlist.txt")
		f, err := os.OpenFile(ul, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(userlistLine(role, password))
		f.Close()
		if err != nil {
			return err
		}
		if pid := PoolerPID(&p); pid > 0 {
			_ = Signal(pid, syscall.SIGHUP) // re-read auth_file
		}
	}
	for _, e := range l.ext {
		if err := e.AddLogin(role, password); err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
	}
	return nil
}

// ---- status and stop ----

// Component is the state of one process of a lab.
type Component struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Port is the TCP port on 127.0.0.1, or for a process that listens on
	// a unix socket the number in its socket's name.
	Port int `json:"port"`
	// Socket is the unix socket of a process that listens on one instead
	// of a TCP port (a relay of test/labtest); empty for the others.
	Socket string `json:"socket,omitempty"`
	// Role is, in an HA lab, the role of a node as its Patroni reports it
	// ("primary", "replica"; empty when Patroni does not answer), and the
	// listener of an HAProxy; empty otherwise.
	Role string `json:"role,omitempty"`
	PID  int    `json:"pid"`
	Up   bool   `json:"up"`
}

// Status reports each process of the lab (servers, or in an HA lab etcd,
// each node's Patroni and PostgreSQL and the HAProxy listeners; then
// poolers, then each extension's): its pid and whether its
// port or socket accepts connections.
func (l *Lab) Status() []Component {
	var out []Component
	add := func(name, kind string, port, pid int) {
		out = append(out, Component{Name: name, Kind: kind, Port: port, PID: pid, Up: pid > 0 && DialOK(port)})
	}
	if l.HA != nil {
		out = l.haStatus()
	} else {
		add("primary", "postgres", l.Primary.Port, ServerPID(&l.Primary))
		if l.Standby != nil {
			add("standby", "postgres", l.Standby.Port, ServerPID(l.Standby))
		}
	}
	for i := range l.Poolers {
		p := &l.Poolers[i]
		add(p.Name, "pgbouncer "+string(p.Mode), p.Port, PoolerPID(p))
	}
	for _, e := range l.ext {
		out = append(out, e.Status()...)
	}
	return out
}

// Running reports whether every process of the lab is up.
func (l *Lab) Running() bool {
	st := l.Status()
	for _, c := range st {
		if !c.Up {
			return false
		}
	}
	return len(st) > 0
}

// anyAlive reports whether any process of the lab still runs, judged by
// pids and not by ports, which a loaded machine may be slow to answer on.
func (l *Lab) anyAlive() bool {
	if ServerPID(&l.Primary) > 0 || (l.Standby != nil && ServerPID(l.Standby) > 0) {
		return true
	}
	for i := range l.Poolers {
		if PoolerPID(&l.Poolers[i]) > 0 {
			return true
		}
	}
	for _, e := range l.ext {
		if e.Alive() {
			return true
		}
	}
	if l.haAlive() {
		return true
	}
	return l.RunDir != "" && len(ProcessesUsing(l.RunDir)) > 0
}

// Stop stops every process the lab started, waits until they are gone and
// removes the lab's files. It is safe to call on a half-started lab.
func (l *Lab) Stop(ctx context.Context) error {
	errs := l.stopExtensions()
	errs = append(errs, l.stopRouterAndPatroni()...)
	for i := range l.Poolers {
		if pid := PoolerPID(&l.Poolers[i]); pid > 0 {
			errs = append(errs, killAndWait(pid, syscall.SIGTERM, 5*time.Second))
		}
	}
	servers := []*Server{}
	if l.Standby != nil {
		servers = append(servers, l.Standby)
	}
	servers = append(servers, &l.Primary)
	for _, s := range servers {
		pid := ServerPID(s)
		if pid == 0 {
			continue
		}
		if err := l.StopServer(ctx, s, "fast"); err != nil {
			errs = append(errs, killAndWait(pid, syscall.SIGQUIT, 5*time.Second))
		}
	}
	errs = append(errs, l.stopEtcd())
	if l.RunDir != "" {
		// Sweep up what is left, in rounds: a parent killed in one round
		// (pgpool-II's main process, say, of an extension that Load did
		// not attach) may have forked a child that the
		// round's list did not have yet.
		for round := 0; round < 3; round++ {
			pids := ProcessesUsing(l.RunDir)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				if err := killAndWait(pid, syscall.SIGKILL, 5*time.Second); err != nil {
					errs = append(errs, err)
				}
			}
		}
		for _, s := range servers {
			errs = append(errs, removeOrphanedShm(s))
		}
		if left := ProcessesUsing(l.RunDir); len(left) > 0 {
			errs = append(errs, fmt.Errorf("processes still running in %s: %v", l.RunDir, left))
		} else if err := os.RemoveAll(l.RunDir); err != nil {
			errs = append(errs, err)
		} else {
			releasePorts(l.RunDir, l.Ports)
		}
	}
	if l.Dir != "" {
		if l.OwnsDir {
			errs = append(errs, os.RemoveAll(l.Dir))
		} else {
			for _, name := range []string{stateFile, "pgpass"} {
				if err := os.Remove(filepath.Join(l.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ---- helpers ----

// callerName is the name of the OS user that runs this process.
func callerName() string {
	u, err := user.Current()
	if err != nil {
		return strconv.Itoa(os.Geteuid())
	}
	return u.Username
}

func (l *Lab) chown(path string) error {
	if l.cred == nil {
		return nil
	}
	if err := os.Chown(path, l.cred.uid, l.cred.gid); err != nil {
		return fmt.Errorf("give %s to the server user: %w", path, err)
	}
	return nil
}

// WriteFile writes a file of the lab's run dir, readable by the server
// user alone.
func (l *Lab) WriteFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return l.chown(path)
}

// Run runs a program as the server user with a clean environment, from the
// run dir, and returns its output.
func (l *Lab) Run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	c := exec.CommandContext(ctx, prog, args...)
	c.Dir = l.RunDir
	c.Env = l.env()
	c.SysProcAttr = groupAttr(l.cred) // in a process group of its own
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	// pg_ctl and pgbouncer -d leave daemons holding our pipes: do not wait
	// for them to close once the program itself has exited.
	c.WaitDelay = time.Second
	err := c.Run()
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		return out.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(prog), strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.Bytes(), nil
}

// env is the clean environment the lab's programs run with.
func (l *Lab) env() []string {
	return []string{"PATH=" + programPath, "LC_ALL=C", "HOME=" + l.RunDir, "TZ=UTC"}
}

// DialOK reports whether 127.0.0.1:port accepts a TCP connection.
func DialOK(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func waitTCP(ctx context.Context, port int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if DialOK(port) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func killAndWait(pid int, sig syscall.Signal, limit time.Duration) error {
	_ = Signal(pid, sig)
	deadline := time.Now().Add(limit)
	for alive(pid) {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				return fmt.Errorf("pid %d did not exit", pid)
			}
			sig = syscall.SIGKILL
			_ = Signal(pid, sig)
			deadline = time.Now().Add(limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func randomPassword() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "lab-" + hex.EncodeToString(b), nil
}

func pgpassLine(user, password string) string {
	esc := func(s string) string { return strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(s) }
	return fmt.Sprintf("*:*:*:%s:%s\n", esc(user), esc(password))
}

func userlistLine(user, password string) string {
	esc := func(s string) string { return strings.ReplaceAll(s, `"`, `""`) }
	return fmt.Sprintf("\"%s\" \"%s\"\n", esc(user), esc(password))
}

func passwordFor(passfile, user string) (string, error) {
	f, err := os.Open(passfile)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 5)
		if len(parts) == 5 && parts[3] == user {
			return strings.ReplaceAll(strings.ReplaceAll(parts[4], `\:`, `:`), `\\`, `\`), nil
		}
	}
	return "", fmt.Errorf("no password for %s in %s", user, passfile)
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return path + ":\n  " + strings.Join(lines, "\n  ")
}

// LogTail returns the last n lines of a lab log file, headed by its path,
// for error messages.
func LogTail(path string, n int) string { return tail(path, n) }
