package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

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

// RouterPID returns the pid of the HA HAProxy, or 0.
func RouterPID(r *HARouter) int { return PIDFromFile(r.PIDFile) }

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
