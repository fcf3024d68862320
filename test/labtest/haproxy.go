package labtest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// ---- HAProxy ----

// startHAProxy starts one HAProxy instance; twin is the lab's twin, for a
// backend that names it.
func (d *FrontDoors) startHAProxy(ctx context.Context, spec HAProxySpec, port int, twin *lab.Server) error {
	l := d.lab
	if spec.Balance == "" {
		spec.Balance = "roundrobin"
	}
	if spec.TimeoutClient == 0 {
		spec.TimeoutClient = longTimeout
	}
	if spec.TimeoutServer == 0 {
		spec.TimeoutServer = longTimeout
	}
	dir, err := l.MakeDir("haproxy-" + spec.Name)
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
	if out, err := exec.CommandContext(ctx, d.haproxyBin, "-v").CombinedOutput(); err == nil {
		h.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if err := l.WriteFile(h.ConfigFile, haproxyConf(l, h)); err != nil {
		return err
	}
	// Check the configuration first: its errors are clearer than a process
	// that exits.
	if _, err := l.Run(ctx, d.haproxyBin, "-c", "-f", h.ConfigFile); err != nil {
		return fmt.Errorf("haproxy %s refuses the configuration the lab wrote for it (balance %q): check the spec's Balance against HAProxy's algorithms: %w", spec.Name, spec.Balance, err)
	}
	l.Logf("start haproxy %s (%s over %s) on 127.0.0.1:%d", spec.Name, spec.Balance, strings.Join(spec.Backends, ", "), port)
	// -db: stay in the foreground, logging to our file.
	pid, err := l.Spawn(dir, d.haproxyBin, []string{"-db", "-f", h.ConfigFile}, h.LogFile, h.PIDFile)
	if pid > 0 {
		d.HAProxies = append(d.HAProxies, *h)
	}
	if err != nil {
		return err
	}
	if err := lab.WaitProcess(ctx, pid, func() (bool, error) { return lab.DialOK(port), nil }, 15*time.Second); err != nil {
		return fmt.Errorf("haproxy %s did not open port %d: %w\n%s", spec.Name, port, err, lab.LogTail(h.LogFile, 15))
	}
	return nil
}

// haproxyConf renders h's haproxy.cfg: TCP mode, one listener, no health
// checks (a down server is found out by the clients sent to it), a log line
// per session on standard error.
func haproxyConf(l *lab.Lab, h *HAProxy) string {
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
func (d *FrontDoors) HAProxyDSN(name string) string {
	if h := d.HAProxy(name); h != nil {
		return d.lab.DSN(h.Port, d.lab.User, "postgres")
	}
	return ""
}

// HAProxy returns the named HAProxy instance, or nil.
func (d *FrontDoors) HAProxy(name string) *HAProxy {
	for i := range d.HAProxies {
		if d.HAProxies[i].Name == name {
			return &d.HAProxies[i]
		}
	}
	return nil
}

// HAProxyPID returns the pid of a running HAProxy instance, or 0.
func HAProxyPID(h *HAProxy) int { return lab.PIDFromFile(h.PIDFile) }
