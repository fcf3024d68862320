package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/leasectl/leasectl/internal/errkind"
	"go.yaml.in/yaml/v3"
)

// High availability: instead of a primary and a standby that the lab runs
// itself, a lab started with Options.HA runs one etcd member, two
// PostgreSQL nodes managed by Patroni (node1 bootstraps the cluster, node2
// clones it with pg_basebackup and streams from it), and one HAProxy whose
// two listeners route by Patroni's REST health checks: "primary" to the
// node that holds the leader key, "replicas" to the node that streams.
// Every process runs as the server OS user, in a session of its own, from
// a directory of the run dir, with its output in a log file there, and is
// stopped by [Lab.Stop].

// HASpec asks Start for a high-availability lab and tunes it. Its zero
// value is a lab tuned for a small, busy test machine: a failover within
// about TTL of a node's death, and HAProxy following a change of primary
// within about a second of Patroni's REST API showing it.
type HASpec struct {
	// TTL is Patroni's ttl: how long the leader key lives without being
	// refreshed, and so about how long a dead primary goes unnoticed. Whole
	// seconds; zero means 10 s.
	TTL time.Duration `json:"ttl"`
	// LoopWait is Patroni's loop_wait: the pause between two runs of its HA
	// loop. Whole seconds; zero means 1 s.
	LoopWait time.Duration `json:"loop_wait"`
	// RetryTimeout is Patroni's retry_timeout: how long it retries etcd and
	// PostgreSQL before it demotes a primary. Whole seconds; zero means 4 s.
	// LoopWait + 2 × RetryTimeout must not exceed TTL.
	RetryTimeout time.Duration `json:"retry_timeout"`
	// CheckInterval is HAProxy's inter: the pause between two health
	// checks of a node; half of it is fastinter, used while a node is
	// changing state, and a fifth of it downinter, used while a node is
	// out of a listener, so that a newly promoted primary enters the
	// primary listener within about 100 ms. Zero means 500 ms.
	CheckInterval time.Duration `json:"check_interval"`
	// CheckTimeout is HAProxy's timeout check: how long a check waits for
	// Patroni's answer. Zero means 1 s.
	CheckTimeout time.Duration `json:"check_timeout"`
	// CheckFall is how many failed checks in a row take a node out of a
	// listener; zero means 2, so that one slow answer on a busy machine
	// does not cut the primary's sessions.
	CheckFall int `json:"check_fall"`
	// CheckRise is how many passed checks in a row put a node into a
	// listener; zero means 1.
	CheckRise int `json:"check_rise"`
}

// HA is the high-availability part of a running lab.
type HA struct {
	// HASpec holds the settings in effect, defaults filled in.
	HASpec
	// Scope is Patroni's cluster name.
	Scope string `json:"scope"`
	// PatroniVersion is the output of `patroni --version`.
	PatroniVersion string `json:"patroni_version"`
	// Etcd is the lab's etcd member, Patroni's DCS.
	Etcd EtcdMember `json:"etcd"`
	// Nodes are node1 and node2, in that order.
	Nodes []HANode `json:"nodes"`
	// Router is the HAProxy that routes by Patroni's health checks.
	Router HARouter `json:"router"`
}

// EtcdMember is the one etcd member of an HA lab, serving the v3 API on its
// client port.
type EtcdMember struct {
	// ClientPort serves clients (Patroni) on 127.0.0.1.
	ClientPort int `json:"client_port"`
	// PeerPort is the member's raft port on 127.0.0.1; no peer ever uses it.
	PeerPort int `json:"peer_port"`
	// Version is the first line of `etcd --version`.
	Version string `json:"version"`
	// DataDir is its data directory.
	DataDir string `json:"data_dir"`
	// PIDFile holds its pid.
	PIDFile string `json:"pid_file"`
	// LogFile receives its log.
	LogFile string `json:"log_file"`
}

// HANode is one PostgreSQL node of an HA lab with its Patroni.
type HANode struct {
	// Name is the Patroni member name: "node1" or "node2".
	Name string `json:"name"`
	// Server is the node's PostgreSQL; its LogFile is PostgreSQL's own log.
	Server
	// RESTPort is where Patroni's REST API listens on 127.0.0.1.
	RESTPort int `json:"rest_port"`
	// ConfigFile is Patroni's configuration. It holds the passwords of the
	// superuser and of the replication user, and like the node's other
	// files is readable by the server OS user alone.
	ConfigFile string `json:"config_file"`
	// PIDFile holds Patroni's pid.
	PIDFile string `json:"pid_file"`
	// PatroniLog receives Patroni's log, and PostgreSQL's until its logging
	// collector runs.
	PatroniLog string `json:"patroni_log"`
}

// HARouter is the HAProxy of an HA lab: one process in TCP mode with two
// listeners, each of which sends a client to the nodes whose Patroni
// answers its health check with 200.
type HARouter struct {
	// PrimaryPort is the "primary" listener: option httpchk OPTIONS
	// /primary, http-check expect status 200. (OPTIONS, as Patroni's own
	// examples have it: Patroni answers it with the status line alone,
	// where after a GET it would write a body to a check connection that
	// HAProxy has already reset, and log a traceback each time.)
	PrimaryPort int `json:"primary_port"`
	// ReplicaPort is the "replicas" listener: option httpchk OPTIONS
	// /replica, http-check expect status 200.
	ReplicaPort int `json:"replica_port"`
	// Checks is the default-server line of both listeners, the check
	// settings as HAProxy reads them, e.g. "inter 500ms fastinter 250ms
	// downinter 100ms fall 2 rise 1 on-marked-down shutdown-sessions".
	Checks string `json:"checks"`
	// CheckTimeout is the `timeout check` line, e.g. "1000ms".
	CheckTimeout string `json:"check_timeout"`
	// Version is the first line of `haproxy -v`.
	Version string `json:"version"`
	// ConfigFile is its haproxy.cfg.
	ConfigFile string `json:"config_file"`
	// StatsSocket is its admin socket, from which HAProxyRoutes reads which
	// node each listener sends clients to.
	StatsSocket string `json:"stats_socket"`
	// PIDFile holds its pid.
	PIDFile string `json:"pid_file"`
	// LogFile receives its log: a line per session and per change of a
	// node's check state.
	LogFile string `json:"log_file"`
}

// HAChange reports a change of primary that the lab made, with how long
// each step took, counted from the switchover request or the kill.
type HAChange struct {
	// From is the node that was the primary.
	From string `json:"from"`
	// To is the node that is the primary now.
	To string `json:"to"`
	// Writable is how long until To accepted a write on its own port.
	Writable time.Duration `json:"writable"`
	// Routed is how long until HAProxy's primary listener sent clients to
	// To, and only to To.
	Routed time.Duration `json:"routed"`
	// Rejoined is, after a switchover, how long until From streamed from To
	// as a replica; zero after KillPrimary, which leaves From dead.
	Rejoined time.Duration `json:"rejoined,omitempty"`
}

// haScope is Patroni's cluster name in every HA lab; each lab has its own
// etcd, so they cannot meet.
const haScope = "leasectl-lab"

// haReplicationUser is the role the replica streams as.
const haReplicationUser = "replicator"

// haPorts is how many TCP ports an HA lab needs besides the nodes' two
// PostgreSQL ports: etcd's client and peer ports, two REST ports and two
// HAProxy listeners.
const haPorts = 6

// ErrNoHA is returned by the HA operations of a lab started without
// Options.HA.
var ErrNoHA = errkind.New(errkind.Input, "this lab has no HA mode (start one with Options.HA set)")

// withDefaults returns s with its zero fields set to the defaults.
func (s HASpec) withDefaults() HASpec {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&s.TTL, 10*time.Second)
	def(&s.LoopWait, time.Second)
	def(&s.RetryTimeout, 4*time.Second)
	def(&s.CheckInterval, 500*time.Millisecond)
	def(&s.CheckTimeout, time.Second)
	if s.CheckFall == 0 {
		s.CheckFall = 2
	}
	if s.CheckRise == 0 {
		s.CheckRise = 1
	}
	return s
}

// checkHA rejects HA settings that Patroni or HAProxy would refuse or that
// could not fail over, before Start starts anything.
func checkHA(s HASpec) error {
	s = s.withDefaults()
	for what, d := range map[string]time.Duration{"TTL": s.TTL, "LoopWait": s.LoopWait, "RetryTimeout": s.RetryTimeout} {
		if d < time.Second || d%time.Second != 0 {
			return fmt.Errorf("lab options: HA %s %v: Patroni counts in whole seconds; use 1s or more, e.g. 10s", what, d)
		}
	}
	if s.LoopWait+2*s.RetryTimeout > s.TTL {
		return fmt.Errorf("lab options: HA LoopWait %v + 2 × RetryTimeout %v exceeds TTL %v, and Patroni could lose the leader key while it retries: raise TTL or lower the others", s.LoopWait, s.RetryTimeout, s.TTL)
	}
	for what, d := range map[string]time.Duration{"CheckInterval": s.CheckInterval, "CheckTimeout": s.CheckTimeout} {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("lab options: HA %s %v is out of range: use 10ms to 1m, or 0 for the default", what, d)
		}
	}
	if s.CheckFall < 0 || s.CheckRise < 0 || s.CheckFall > 100 || s.CheckRise > 100 {
		return fmt.Errorf("lab options: HA CheckFall %d and CheckRise %d must be 1 to 100, or 0 for the default", s.CheckFall, s.CheckRise)
	}
	return nil
}

// ---- start ----

// startHA starts etcd, node1 (which bootstraps the cluster), node2 (which
// clones node1 and streams from it) and HAProxy, and returns once node1
// accepts writes, node2 streams, and each HAProxy listener sends clients to
// its node and only there. pgPorts are the nodes' PostgreSQL ports, ports
// the other haPorts ports. Each process is recorded in l before it starts,
// so that Stop ends it whatever happens next.
func (l *Lab) startHA(ctx context.Context, spec HASpec, pgPorts [2]int, ports []int, password string) error {
	began := time.Now()
	replPassword, err := randomPassword()
	if err != nil {
		return err
	}
	spec = spec.withDefaults()
	ha := &HA{HASpec: spec, Scope: haScope}
	if out, err := exec.CommandContext(ctx, l.Bin.Patroni, "--version").CombinedOutput(); err == nil {
		ha.PatroniVersion = strings.TrimSpace(string(out))
	}
	etcdDir, err := l.MakeDir("etcd")
	if err != nil {
		return err
	}
	ha.Etcd = EtcdMember{
		ClientPort: ports[0],
		PeerPort:   ports[1],
		DataDir:    filepath.Join(etcdDir, "data"),
		PIDFile:    filepath.Join(etcdDir, "etcd.pid"),
		LogFile:    filepath.Join(etcdDir, "etcd.log"),
	}
	if out, err := exec.CommandContext(ctx, l.Bin.Etcd, "--version").CombinedOutput(); err == nil {
		ha.Etcd.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("node%d", i+1)
		dir, err := l.MakeDir(name)
		if err != nil {
			return err
		}
		sock := filepath.Join(dir, "sock")
		if err := os.MkdirAll(sock, 0o700); err != nil {
			return err
		}
		if err := l.chown(sock); err != nil {
			return err
		}
		if p := filepath.Join(sock, ".s.PGSQL."+strconv.Itoa(pgPorts[i])); len(p) > MaxSocketPath {
			return fmt.Errorf("HA lab: the socket path %s is longer than the %d bytes a unix socket may have: use a shorter TMPDIR", p, MaxSocketPath)
		}
		ha.Nodes = append(ha.Nodes, HANode{
			Name: name,
			Server: Server{
				Port:      pgPorts[i],
				DataDir:   filepath.Join(dir, "data"),
				SocketDir: sock,
				LogFile:   filepath.Join(dir, "postgresql.log"),
			},
			RESTPort:   ports[2+i],
			ConfigFile: filepath.Join(dir, "patroni.yml"),
			PIDFile:    filepath.Join(dir, "patroni.pid"),
			PatroniLog: filepath.Join(dir, "patroni.log"),
		})
	}
	routerDir, err := l.MakeDir("haproxy-ha")
	if err != nil {
		return err
	}
	ha.Router = HARouter{
		PrimaryPort: ports[4],
		ReplicaPort: ports[5],
		ConfigFile:  filepath.Join(routerDir, "haproxy.cfg"),
		StatsSocket: filepath.Join(routerDir, "stats.sock"),
		PIDFile:     filepath.Join(routerDir, "haproxy.pid"),
		LogFile:     filepath.Join(routerDir, "haproxy.log"),
	}
	if len(ha.Router.StatsSocket) > MaxSocketPath {
		return fmt.Errorf("HA lab: the socket path %s is longer than the %d bytes a unix socket may have: use a shorter TMPDIR", ha.Router.StatsSocket, MaxSocketPath)
	}
	if out, err := exec.CommandContext(ctx, l.Bin.HAProxy, "-v").CombinedOutput(); err == nil {
		ha.Router.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	l.HA = ha
	l.Primary = ha.Nodes[0].Server
	standby := ha.Nodes[1].Server
	l.Standby = &standby
	for i := range ha.Nodes {
		conf, err := l.patroniConf(&ha.Nodes[i], password, replPassword)
		if err != nil {
			return err
		}
		if err := l.WriteFile(ha.Nodes[i].ConfigFile, conf); err != nil {
			return err
		}
	}
	if err := l.WriteFile(ha.Router.ConfigFile, l.haRouterConf()); err != nil {
		return err
	}
	if _, err := l.Run(ctx, l.Bin.HAProxy, "-c", "-f", ha.Router.ConfigFile); err != nil {
		return fmt.Errorf("haproxy refuses the configuration the lab wrote for it (check the HA spec's check settings): %w", err)
	}
	if err := l.save(); err != nil { // from here on `lab down` can clean up
		return err
	}

	if err := l.startEtcd(ctx); err != nil {
		return err
	}
	node1, node2 := &ha.Nodes[0], &ha.Nodes[1]
	l.Logf("start patroni %s: bootstrap PostgreSQL on 127.0.0.1:%d (REST API on %d)", node1.Name, node1.Port, node1.RESTPort)
	if err := l.startPatroni(node1); err != nil {
		return err
	}
	if err := l.waitWritable(ctx, node1, 90*time.Second); err != nil {
		return err
	}
	if err := droppedSettings(node1.PatroniLog); err != nil {
		return err
	}
	l.Logf("start patroni %s: clone %s and stream from it, on 127.0.0.1:%d (REST API on %d)", node2.Name, node1.Name, node2.Port, node2.RESTPort)
	if err := l.startPatroni(node2); err != nil {
		return err
	}
	if err := l.waitStreaming(ctx, node1, node2, 90*time.Second); err != nil {
		return err
	}
	if err := l.startRouter(ctx); err != nil {
		return err
	}
	l.Logf("HA lab ready in %.1fs: %s primary, %s streaming, haproxy primary on %d, replicas on %d",
		time.Since(began).Seconds(), node1.Name, node2.Name, ha.Router.PrimaryPort, ha.Router.ReplicaPort)
	return nil
}

// startEtcd starts the lab's etcd member and waits until it is healthy.
// etcd 3.4 serves the v3 API, with the JSON gateway under /v3/ that Patroni's
// etcd3 client speaks, by default; the v2 API, which Patroni's etcd (not
// etcd3) section would need, stays off.
func (l *Lab) startEtcd(ctx context.Context) error {
	e := &l.HA.Etcd
	token, err := randomPassword()
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(e.ClientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(e.PeerPort)
	args := []string{
		"--name", "lab",
		"--data-dir", e.DataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", "lab=" + peer,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", token,
		"--enable-v2=false",
		"--logger", "zap",
		"--log-outputs", "stderr",
	}
	l.Logf("start etcd on 127.0.0.1:%d (peer port %d)", e.ClientPort, e.PeerPort)
	pid, err := l.Spawn(filepath.Dir(e.DataDir), l.Bin.Etcd, args, e.LogFile, e.PIDFile)
	if err != nil {
		return err
	}
	healthy := func() (bool, error) {
		code, body, err := httpGet(ctx, e.ClientPort, "/health", time.Second)
		return err == nil && code == 200 && strings.Contains(string(body), `"true"`), nil
	}
	if err := WaitProcess(ctx, pid, healthy, 30*time.Second); err != nil {
		return fmt.Errorf("etcd on port %d did not become healthy: %w\n%s%s", e.ClientPort, err, LogProblems(e.LogFile, 5), tail(e.LogFile, 10))
	}
	return nil
}

// startPatroni starts n's Patroni in the foreground of a session of its
// own; it starts n's PostgreSQL, which it puts in a session of its own too.
func (l *Lab) startPatroni(n *HANode) error {
	_, err := l.Spawn(filepath.Dir(n.ConfigFile), l.Bin.Patroni, []string{n.ConfigFile}, n.PatroniLog, n.PIDFile)
	return err
}

// patroniConf renders n's patroni.yml.
//
// Settings that must be equal on every node (max_connections, wal_level,
// max_wal_senders, ...) go to bootstrap.dcs: Patroni takes them from the
// DCS and ignores them in a node's own parameters. The lab's Settings are
// given to Patroni without the quotes postgresql.conf needs, as Patroni
// quotes every value itself.
func (l *Lab) patroniConf(n *HANode, password, replPassword string) (string, error) {
	ha := l.HA
	secs := func(d time.Duration) int { return int(d / time.Second) }
	params := map[string]any{
		"unix_socket_directories":     n.SocketDir,
		"shared_buffers":              "32MB",
		"fsync":                       "off",
		"synchronous_commit":          "on",
		"full_page_writes":            "on",   // pg_rewind needs it
		"dynamic_shared_memory_type":  "mmap", // in the data dir, not /dev/shm: nothing outlives a SIGKILLed node but its files
		"wal_retrieve_retry_interval": "500ms",
		"logging_collector":           "on",
		"log_directory":               filepath.Dir(n.LogFile),
		"log_filename":                filepath.Base(n.LogFile),
		"log_rotation_age":            "0",
		"log_rotation_size":           "0",
		"log_min_messages":            "warning",
		"log_connections":             "off",
	}
	for k, v := range l.Settings {
		params[k] = unquoteSetting(v)
	}
	hba := []string{
		"local all all trust",
		"host all all 127.0.0.1/32 scram-sha-256",
		"host replication " + haReplicationUser + " 127.0.0.1/32 scram-sha-256",
	}
	hba = append(hba, l.HBA...)
	conf := map[string]any{
		"scope":     ha.Scope,
		"namespace": "/leasectl/",
		"name":      n.Name,
		"log":       map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          "127.0.0.1:" + strconv.Itoa(n.RESTPort),
			"connect_address": "127.0.0.1:" + strconv.Itoa(n.RESTPort),
		},
		"etcd3":    map[string]any{"hosts": []string{"127.0.0.1:" + strconv.Itoa(ha.Etcd.ClientPort)}, "protocol": "http"},
		"watchdog": map[string]any{"mode": "off"},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl":                     secs(ha.TTL),
				"loop_wait":               secs(ha.LoopWait),
				"retry_timeout":           secs(ha.RetryTimeout),
				"maximum_lag_on_failover": 1 << 30,
				"synchronous_mode":        false,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters": map[string]any{
						"max_connections":           300,
						"max_prepared_transactions": 20,
						"max_locks_per_transaction": 128,
						"wal_level":                 "replica",
						"max_wal_senders":           10,
						"max_replication_slots":     10,
						"hot_standby":               "on",
						"wal_log_hints":             "on",
					},
				},
			},
			"initdb": []any{
				map[string]string{"encoding": "UTF8"},
				map[string]string{"locale": "C"},
				map[string]string{"auth-local": "trust"},
				map[string]string{"auth-host": "scram-sha-256"},
				"no-sync",
			},
		},
		"postgresql": map[string]any{
			"listen":          "127.0.0.1:" + strconv.Itoa(n.Port),
			"connect_address": "127.0.0.1:" + strconv.Itoa(n.Port),
			"data_dir":        n.DataDir,
			"bin_dir":         filepath.Dir(l.Bin.Postgres),
			"pgpass":          filepath.Join(filepath.Dir(n.ConfigFile), "pgpass"),
			"use_unix_socket": true,
			"authentication": map[string]any{
				"superuser":   map[string]string{"username": l.User, "password": password},
				"replication": map[string]string{"username": haReplicationUser, "password": replPassword},
			},
			"parameters": params,
			"pg_hba":     hba,
			"basebackup": []any{map[string]string{"checkpoint": "fast"}, "no-sync"},
			"remove_data_directory_on_rewind_failure":     true,
			"remove_data_directory_on_diverged_timelines": true,
		},
	}
	out, err := yaml.Marshal(conf)
	if err != nil {
		return "", err
	}
	return "# leasectl lab: patroni " + n.Name + "\n" + string(out), nil
}

// droppedSettings fails when Patroni's log says it removed a parameter from
// the configuration: where PostgreSQL refuses to start with a value it
// rejects, Patroni validates every parameter itself and drops a bad one
// with a warning, and the node would run without it.
func droppedSettings(patroniLog string) error {
	var dropped []string
	for _, line := range strings.Split(readFile(patroniLog), "\n") {
		if strings.Contains(line, "WARNING: Removing") && strings.Contains(line, "parameter") {
			dropped = append(dropped, "  "+line)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	return fmt.Errorf("patroni dropped settings it found invalid (fix them in the lab's Settings):\n%s", strings.Join(dropped, "\n"))
}

// unquoteSetting turns a postgresql.conf value such as 'from-settings' into
// the bare value Patroni expects: it quotes each value itself.
func unquoteSetting(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	}
	return v
}

// haRouterConf renders the HA HAProxy's haproxy.cfg.
func (l *Lab) haRouterConf() string {
	ha := l.HA
	ms := func(d time.Duration) int64 { return max(d.Milliseconds(), 1) }
	r := &ha.Router
	r.Checks = fmt.Sprintf("inter %dms fastinter %dms downinter %dms fall %d rise %d on-marked-down shutdown-sessions",
		ms(ha.CheckInterval), ms(ha.CheckInterval/2), ms(ha.CheckInterval/5), ha.CheckFall, ha.CheckRise)
	r.CheckTimeout = fmt.Sprintf("%dms", ms(ha.CheckTimeout))
	var b strings.Builder
	fmt.Fprintf(&b, `# leasectl lab: haproxy routing by Patroni's REST API
global
    maxconn 1000
    nbthread 1
    log stderr format raw local0 info
    stats socket %s mode 600 level user

defaults
    mode tcp
    log global
    option tcplog
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout check %s
`, r.StatsSocket, r.CheckTimeout)
	for _, lis := range []struct {
		name, check string
		port        int
	}{{"primary", "/primary", r.PrimaryPort}, {"replicas", "/replica", r.ReplicaPort}} {
		fmt.Fprintf(&b, "\nlisten %s\n    bind 127.0.0.1:%d\n    balance roundrobin\n    option httpchk OPTIONS %s\n    http-check expect status 200\n    default-server %s\n",
			lis.name, lis.port, lis.check, r.Checks)
		for _, n := range ha.Nodes {
			fmt.Fprintf(&b, "    server %s 127.0.0.1:%d check port %d\n", n.Name, n.Port, n.RESTPort)
		}
	}
	return b.String()
}

// startRouter starts the HA HAProxy and waits until its primary listener
// sends clients to node1 alone and its replicas listener to node2 alone.
func (l *Lab) startRouter(ctx context.Context) error {
	r := &l.HA.Router
	l.Logf("start haproxy: primary on 127.0.0.1:%d, replicas on 127.0.0.1:%d (checks: %s)", r.PrimaryPort, r.ReplicaPort, r.Checks)
	pid, err := l.Spawn(filepath.Dir(r.ConfigFile), l.Bin.HAProxy, []string{"-db", "-f", r.ConfigFile}, r.LogFile, r.PIDFile)
	if err != nil {
		return err
	}
	primary, replica := l.HA.Nodes[0].Name, l.HA.Nodes[1].Name
	routed := func() (bool, error) {
		routes, err := l.HAProxyRoutes()
		if err != nil {
			return false, nil
		}
		return sameNodes(routes["primary"], primary) && sameNodes(routes["replicas"], replica), nil
	}
	if err := WaitProcess(ctx, pid, routed, 30*time.Second); err != nil {
		routes, _ := l.HAProxyRoutes()
		return fmt.Errorf("haproxy did not route primary to %s and replicas to %s (routes now: %v): %w\n%s", primary, replica, routes, err, tail(r.LogFile, 15))
	}
	if err := l.waitRouted(ctx, &l.HA.Nodes[0], 10*time.Second); err != nil {
		return err
	}
	return l.waitReplicaRouted(ctx, &l.HA.Nodes[1], 10*time.Second)
}

// ---- state ----

// SetLog sends the lab's progress lines (one per step, as Options.Log
// does for Start) to w; nil discards them. A lab from Load discards them
// until told otherwise.
func (l *Lab) SetLog(w io.Writer) {
	if w == nil {
		w = io.Discard
	}
	l.log = w
}

// HANode returns the HA node called name, or nil.
func (l *Lab) HANode(name string) *HANode {
	if l.HA == nil {
		return nil
	}
	for i := range l.HA.Nodes {
		if l.HA.Nodes[i].Name == name {
			return &l.HA.Nodes[i]
		}
	}
	return nil
}

// otherNode returns the HA node that is not n.
func (l *Lab) otherNode(n *HANode) *HANode {
	for i := range l.HA.Nodes {
		if l.HA.Nodes[i].Name != n.Name {
			return &l.HA.Nodes[i]
		}
	}
	return nil
}

// HAMultiHostDSN names node1 and then node2, with
// target_session_attrs=primary: a client finds the primary whichever node
// it is. Empty when the lab has no HA mode.
func (l *Lab) HAMultiHostDSN() string {
	if l.HA == nil {
		return ""
	}
	hosts := make([]string, len(l.HA.Nodes))
	for i, n := range l.HA.Nodes {
		hosts[i] = "127.0.0.1:" + strconv.Itoa(n.Port)
	}
	return fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable&target_session_attrs=primary&passfile=%s",
		url.PathEscape(l.User), strings.Join(hosts, ","), url.QueryEscape(l.PassFile))
}

// HAPrimaryDSN is HAProxy's primary listener, which follows the primary.
// Empty when the lab has no HA mode.
func (l *Lab) HAPrimaryDSN() string {
	if l.HA == nil {
		return ""
	}
	return l.DSN(l.HA.Router.PrimaryPort, l.User, "postgres")
}

// HAReplicaDSN is HAProxy's replicas listener, which sends clients to a
// running replica. Empty when the lab has no HA mode.
func (l *Lab) HAReplicaDSN() string {
	if l.HA == nil {
		return ""
	}
	return l.DSN(l.HA.Router.ReplicaPort, l.User, "postgres")
}

// PatroniPID returns the pid of n's running Patroni, or 0.
func PatroniPID(n *HANode) int { return PIDFromFile(n.PIDFile) }

// EtcdPID returns the pid of the running etcd member, or 0.
func EtcdPID(e *EtcdMember) int { return PIDFromFile(e.PIDFile) }

// RouterPID returns the pid of the HA HAProxy, or 0.
func RouterPID(r *HARouter) int { return PIDFromFile(r.PIDFile) }

// PatroniRole asks n's Patroni for the role of its PostgreSQL: "primary",
// "replica", or another word Patroni uses ("uninitialized", ...). Patroni
// 3.0 calls the primary "master"; this returns "primary" for it.
func PatroniRole(ctx context.Context, n *HANode) (string, error) {
	code, body, err := httpGet(ctx, n.RESTPort, "/patroni", 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("ask patroni %s for its role: %w", n.Name, err)
	}
	var st struct {
		Role  string `json:"role"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return "", fmt.Errorf("patroni %s answered GET /patroni with %d and no JSON: %q", n.Name, code, body)
	}
	if st.Role == "master" {
		st.Role = "primary"
	}
	return st.Role, nil
}

// HAPrimary returns the node whose Patroni says it is the primary now (GET
// /primary answers 200: it holds the leader key and its PostgreSQL runs),
// whatever l.Primary says. It fails when no node is, as during a failover,
// or when both claim to be.
func (l *Lab) HAPrimary(ctx context.Context) (*HANode, error) {
	if l.HA == nil {
		return nil, ErrNoHA
	}
	var found []*HANode
	for i := range l.HA.Nodes {
		n := &l.HA.Nodes[i]
		if code, _, err := httpGet(ctx, n.RESTPort, "/primary", 2*time.Second); err == nil && code == 200 {
			found = append(found, n)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("no node is the primary now: a failover may be under way (Patroni promotes a replica once the leader key expires, within ttl %v), or every node is down (see: leasectl lab status)", l.HA.TTL)
	default:
		return nil, errors.New("both nodes claim to be the primary: a split brain that Patroni should not allow; see the patroni.log of each node")
	}
}

// HAProxyRoutes reads from HAProxy's stats socket which nodes each listener
// ("primary", "replicas") sends clients to now, in node order: those whose
// check state is UP and whose last check passed. (HAProxy deems every
// server UP before its first check, and keeps it UP until CheckFall checks
// in a row fail; neither counts here.)
func (l *Lab) HAProxyRoutes() (map[string][]string, error) {
	if l.HA == nil {
		return nil, ErrNoHA
	}
	c, err := net.DialTimeout("unix", l.HA.Router.StatsSocket, time.Second)
	if err != nil {
		return nil, fmt.Errorf("haproxy's stats socket: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, fmt.Errorf("haproxy's stats socket: %w", err)
	}
	routes := map[string][]string{"primary": {}, "replicas": {}}
	sc := bufio.NewScanner(c)
	status, check := -1, -1
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ",")
		if strings.HasPrefix(sc.Text(), "# ") {
			for i, f := range fields {
				switch f {
				case "status":
					status = i
				case "check_status":
					check = i
				}
			}
			continue
		}
		if status < 0 || check < 0 || len(fields) <= max(status, check) {
			continue
		}
		px, sv := fields[0], fields[1]
		if _, ok := routes[px]; ok && sv != "FRONTEND" && sv != "BACKEND" && fields[status] == "UP" && fields[check] == "L7OK" {
			routes[px] = append(routes[px], sv)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("haproxy's stats socket: %w", err)
	}
	if status < 0 || check < 0 {
		return nil, errors.New("haproxy's stats socket sent no CSV header with status and check_status")
	}
	for _, v := range routes {
		sort.Strings(v)
	}
	return routes, nil
}

func sameNodes(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// ---- operations ----

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

// waitRouted waits until HAProxy's primary listener sends clients to n
// alone, and a session through it reaches n out of recovery.
func (l *Lab) waitRouted(ctx context.Context, n *HANode, limit time.Duration) error {
	routed := func() (bool, error) {
		routes, err := l.HAProxyRoutes()
		if err != nil {
			return false, err
		}
		if !sameNodes(routes["primary"], n.Name) {
			return false, fmt.Errorf("haproxy's primary listener sends clients to %v", routes["primary"])
		}
		port, inRecovery, err := l.serverBehind(ctx, l.HA.Router.PrimaryPort)
		if err != nil {
			return false, err
		}
		if port != n.Port || inRecovery {
			return false, fmt.Errorf("haproxy's primary listener reached port %d (in recovery: %v)", port, inRecovery)
		}
		return true, nil
	}
	if err := poll(ctx, limit, routed); err != nil {
		return fmt.Errorf("haproxy's primary listener (port %d) does not lead to %s: %w\n%s", l.HA.Router.PrimaryPort, n.Name, err, tail(l.HA.Router.LogFile, 10))
	}
	return nil
}

// waitReplicaRouted waits until HAProxy's replicas listener sends clients
// to n alone, and a session through it reaches n in recovery.
func (l *Lab) waitReplicaRouted(ctx context.Context, n *HANode, limit time.Duration) error {
	routed := func() (bool, error) {
		routes, err := l.HAProxyRoutes()
		if err != nil {
			return false, err
		}
		if !sameNodes(routes["replicas"], n.Name) {
			return false, fmt.Errorf("haproxy's replicas listener sends clients to %v", routes["replicas"])
		}
		port, inRecovery, err := l.serverBehind(ctx, l.HA.Router.ReplicaPort)
		if err != nil {
			return false, err
		}
		if port != n.Port || !inRecovery {
			return false, fmt.Errorf("haproxy's replicas listener reached port %d (in recovery: %v)", port, inRecovery)
		}
		return true, nil
	}
	if err := poll(ctx, limit, routed); err != nil {
		return fmt.Errorf("haproxy's replicas listener (port %d) does not lead to %s: %w\n%s", l.HA.Router.ReplicaPort, n.Name, err, tail(l.HA.Router.LogFile, 10))
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

// httpGet sends GET path to 127.0.0.1:port.
func httpGet(ctx context.Context, port int, path string, limit time.Duration) (int, []byte, error) {
	return httpDo(ctx, http.MethodGet, port, path, nil, limit)
}

// httpDo sends one HTTP request to 127.0.0.1:port and returns the status
// and the body.
func httpDo(ctx context.Context, method string, port int, path string, body []byte, limit time.Duration) (int, []byte, error) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(cctx, method, "http://127.0.0.1:"+strconv.Itoa(port)+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := haHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, data, err
}

// haHTTP talks to Patroni and etcd on loopback, never through a proxy, and
// keeps no idle connection to a server that may be killed.
var haHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// ---- status and stop ----

// haStatus reports etcd, each node's Patroni and PostgreSQL with the role
// its Patroni gives, and the two HAProxy listeners, as Status does.
func (l *Lab) haStatus() []Component {
	ha := l.HA
	var out []Component
	add := func(name, kind, role string, port, pid int) {
		out = append(out, Component{Name: name, Kind: kind, Role: role, Port: port, PID: pid, Up: pid > 0 && DialOK(port)})
	}
	add("etcd", "etcd", "", ha.Etcd.ClientPort, EtcdPID(&ha.Etcd))
	roles := make([]string, len(ha.Nodes))
	var wg sync.WaitGroup
	for i := range ha.Nodes {
		if PatroniPID(&ha.Nodes[i]) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			roles[i], _ = PatroniRole(context.Background(), &ha.Nodes[i])
		}()
	}
	wg.Wait()
	for i := range ha.Nodes {
		n := &ha.Nodes[i]
		add(n.Name, "patroni", roles[i], n.RESTPort, PatroniPID(n))
		add(n.Name+"-pg", "postgres", roles[i], n.Port, ServerPID(&n.Server))
	}
	pid := RouterPID(&ha.Router)
	add("ha-primary", "haproxy", "primary", ha.Router.PrimaryPort, pid)
	add("ha-replicas", "haproxy", "replicas", ha.Router.ReplicaPort, pid)
	return out
}

// haAlive reports whether any HA process (etcd, a Patroni, HAProxy) still
// runs; the nodes' PostgreSQL are l.Primary and l.Standby.
func (l *Lab) haAlive() bool {
	if l.HA == nil {
		return false
	}
	if EtcdPID(&l.HA.Etcd) > 0 || RouterPID(&l.HA.Router) > 0 {
		return true
	}
	for i := range l.HA.Nodes {
		if PatroniPID(&l.HA.Nodes[i]) > 0 || ServerPID(&l.HA.Nodes[i].Server) > 0 {
			return true
		}
	}
	return false
}

// stopRouterAndPatroni stops HAProxy, then both Patroni at once with
// SIGTERM: each shuts its PostgreSQL down (fast) and gives up its keys
// before it exits, and neither promotes while it is stopping. etcd must
// still run for that; stopEtcd ends it afterwards.
func (l *Lab) stopRouterAndPatroni() []error {
	if l.HA == nil {
		return nil
	}
	var errs []error
	if pid := RouterPID(&l.HA.Router); pid > 0 {
		errs = append(errs, StopGroup(pid, syscall.SIGTERM, 5*time.Second))
	}
	results := make([]error, len(l.HA.Nodes))
	var wg sync.WaitGroup
	for i := range l.HA.Nodes {
		pid := PatroniPID(&l.HA.Nodes[i])
		if pid == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = StopGroup(pid, syscall.SIGTERM, 30*time.Second)
		}()
	}
	wg.Wait()
	return append(errs, results...)
}

// stopEtcd stops the etcd member.
func (l *Lab) stopEtcd() error {
	if l.HA == nil {
		return nil
	}
	if pid := EtcdPID(&l.HA.Etcd); pid > 0 {
		return StopGroup(pid, syscall.SIGTERM, 10*time.Second)
	}
	return nil
}
