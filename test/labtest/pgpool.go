package labtest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// ---- pgpool-II ----

// startPgPool starts pgpool-II in front of the primary (backend 0) and the
// standby (backend 1), or in overTwin replication mode in front of the
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
func (d *FrontDoors) startPgPool(ctx context.Context, spec PgPoolSpec, port int, password string, twin *lab.Server) error {
	l := d.lab
	overTwin := twinMode(spec.Mode)
	switch {
	case overTwin && twin == nil:
		return fmt.Errorf("pgpool in %s mode needs the twin, and there is none", spec.Mode)
	case !overTwin && l.Standby == nil:
		return errors.New("pgpool needs the lab's standby, and there is none (start the lab with Standby: true)")
	}
	dir, err := l.MakeDir("pgpool")
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
	if overTwin {
		p.Twin = twin
	}
	if out, err := exec.CommandContext(ctx, d.pgpoolBin, "--version").CombinedOutput(); err == nil {
		p.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	files := map[string]string{
		"pool_passwd": poolPasswdLine(l.User, password),
		"pool_hba.conf": "# leasectl lab: SCRAM against pool_passwd, from this host only\n" +
			"local all all scram-sha-256\n" +
			"host  all all 127.0.0.1/32 scram-sha-256\n",
		"pcp.conf":    "# leasectl lab: no PCP users\n",
		"pgpool.conf": pgpoolConf(l, p),
	}
	for name, content := range files {
		if err := l.WriteFile(filepath.Join(dir, name), content); err != nil {
			return err
		}
	}
	if overTwin {
		l.Logf("start pgpool-II on 127.0.0.1:%d (%s mode over primary %d and twin %d)", port, spec.Mode, l.Primary.Port, twin.Port)
	} else {
		l.Logf("start pgpool-II on 127.0.0.1:%d (primary %d, standby %d, load balancing)", port, l.Primary.Port, l.Standby.Port)
	}
	// -n: stay in the foreground, so that its log goes to our file; -D:
	// forget any saved backend status.
	pid, err := l.Spawn(dir, d.pgpoolBin, []string{"-n", "-D", "-f", p.ConfigFile, "-F", filepath.Join(dir, "pcp.conf"), "-a", filepath.Join(dir, "pool_hba.conf")}, p.LogFile, p.PIDFile)
	if pid > 0 {
		d.PgPool = p
	}
	if err != nil {
		return err
	}
	// pgpool opens its port before it knows which backend is the primary,
	// and gives up looking after search_primary_node_timeout; without a
	// primary it would send everything to the wrong place. Over the twin
	// (native replication and raw mode) it looks for none.
	ready := func() (bool, error) {
		log := readFile(p.LogFile)
		switch {
		case !strings.Contains(log, "successfully started"):
			return false, nil
		case !overTwin && !strings.Contains(log, "primary node is 0"):
			return false, fmt.Errorf("it started without finding the primary among its backends (can sr_check_user %s log in with the password in pool_passwd?)", l.User)
		}
		return lab.DialOK(port), nil
	}
	if err := lab.WaitProcess(ctx, pid, ready, 30*time.Second); err != nil {
		return fmt.Errorf("pgpool-II on port %d did not come up knowing the primary (backend 0): %w\n%s%s", port, err, lab.LogProblems(p.LogFile, 5), lab.LogTail(p.LogFile, 10))
	}
	return nil
}

// pgpoolConf renders p's pgpool.conf: streaming-replication mode (or native
// replication or raw mode over primary and twin) with load balancing on, and nothing that
// watches, fails over or reconnects on its own (no health checks, failover,
// watchdog or replication-delay checks), so that the lab's own restarts and
// promotions are not second-guessed.
func pgpoolConf(l *lab.Lab, p *PgPool) string {
	dir := filepath.Dir(p.ConfigFile)
	q := func(s string) string { return "'" + s + "'" }
	mode, second, secondName := "streaming_replication", 0, "standby"
	switch {
	case twinMode(p.Mode) && p.Twin != nil:
		mode, second, secondName = p.Mode, p.Twin.Port, twinName
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
func (d *FrontDoors) PgPoolDSN() string {
	if d.PgPool == nil {
		return ""
	}
	return d.lab.DSN(d.PgPool.Port, d.lab.User, "postgres")
}

// pgpoolOwnPIDFile is the name of the pid file pgpool-II writes itself, in
// its directory.
const pgpoolOwnPIDFile = "pgpool-main.pid"

// PgPoolPID returns the pid of pgpool-II's main process, or 0 when it is
// not running. It falls back on the pid file pgpool writes itself: Stop
// must find the main process, as only a shutdown through it removes
// pgpool's shared memory and semaphores (a SIGKILL leaves them behind).
func PgPoolPID(p *PgPool) int {
	if pid := lab.PIDFromFile(p.PIDFile); pid > 0 {
		return pid
	}
	return lab.PIDFromFile(filepath.Join(filepath.Dir(p.ConfigFile), pgpoolOwnPIDFile))
}
