package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/errkind"
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
