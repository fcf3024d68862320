package labtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// ---- nginx ----

// NginxSpec describes one nginx instance of a lab: an nginx master with its
// workers, proxying TCP (the stream module) to the lab's servers, with no
// health checks.
type NginxSpec struct {
	// Name identifies the instance in DSN lookups and in its directory;
	// no other nginx or HAProxy instance of the lab may have it.
	Name string `json:"name"`
	// Backends are the servers behind it, each "primary", "standby" or
	// "twin" (TwinBackend), in order, as HAProxySpec.Backends.
	Backends []string `json:"backends"`
	// Policy is how the upstream picks a server for each new connection:
	// "" (round robin, nginx's default), "least_conn", "random", or "hash"
	// (`hash $remote_addr;`: every connection of the lab comes from
	// 127.0.0.1, so all of them reach one server).
	Policy string `json:"policy,omitempty"`
	// Zone puts the upstream in shared memory (`zone NAME 64k;`), so that
	// the workers share one round-robin position (and one count of
	// connections for least_conn). Without it each worker keeps its own.
	Zone bool `json:"zone,omitempty"`
	// Workers is worker_processes; zero means 2.
	Workers int `json:"workers,omitempty"`
}

// Nginx is one running nginx instance of a lab.
type Nginx struct {
	NginxSpec
	// Port is where the instance listens on 127.0.0.1.
	Port int `json:"port"`
	// Version is what `nginx -v` prints ("nginx version: nginx/1.22.1").
	Version string `json:"version"`
	// ConfigFile is its nginx.conf.
	ConfigFile string `json:"config_file"`
	// PIDFile holds the pid of its master process, which leads the process
	// group of its workers.
	PIDFile string `json:"pid_file"`
	// LogFile receives its error log (level info) and a line per session:
	// client, worker pid, upstream address, status, duration.
	LogFile string `json:"log_file"`
	// Twin is the twin when a backend names it; nil otherwise.
	Twin *lab.Server `json:"twin,omitempty"`
}

// The NginxSpec policies.
var nginxPolicies = map[string]string{
	"":           "", // round robin
	"least_conn": "least_conn;",
	"random":     "random;",
	"hash":       "hash $remote_addr;",
}

// defaultNginxWorkers is worker_processes when NginxSpec.Workers is zero;
// maxNginxWorkers is the most a spec may ask for.
const (
	defaultNginxWorkers = 2
	maxNginxWorkers     = 32
)

// Where nginx is looked for before PATH, and its stream module when nginx
// is built with it as a dynamic module (Debian's nginx: the module is the
// package libnginx-mod-stream), after the directory nginx names with
// --modules-path.
var (
	nginxDirs       = pgPoolDirs
	nginxModuleDirs = []string{"/usr/lib/nginx/modules", "/usr/lib64/nginx/modules", "/usr/share/nginx/modules", "/usr/local/lib/nginx/modules", "/usr/local/nginx/modules"}
)

// nginxStreamModule is the file of the stream module.
const nginxStreamModule = "ngx_stream_module.so"

// findStreamModule returns the stream module that nginx at bin needs
// loaded, or "" when it is built in; an error when nginx has none.
func findStreamModule(bin string) (string, error) {
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -V: %w\n%s", bin, err, strings.TrimSpace(string(out)))
	}
	var dirs []string
	for _, f := range strings.Fields(string(out)) {
		switch {
		case f == "--with-stream":
			return "", nil // built in
		case strings.HasPrefix(f, "--modules-path="):
			dirs = append(dirs, strings.TrimPrefix(f, "--modules-path="))
		}
	}
	for _, d := range nginxModuleDirs {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, nginxStreamModule)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("nginx (%s) has no stream module, which proxies TCP: it is not built in, and %s is in none of %s (install Debian's libnginx-mod-stream: sudo apt-get install -y libnginx-mod-stream)",
		bin, nginxStreamModule, strings.Join(dirs, ", "))
}

// startNginx starts one nginx instance; twin is the lab's twin, for a
// backend that names it.
//
// nginx runs as the server user, as the lab's other programs do (so with
// no `user` directive: nginx ignores it, with a warning, in a master that
// is not root), in the foreground (daemon off) with its master process,
// whose pid Spawn records. Every path it writes is in its directory: its
// pid file, lock file and error log are set in nginx.conf, and -e (nginx
// 1.19.5 on) and -p keep the error log it opens before reading nginx.conf,
// and its prefix, away from the built-in defaults (/var/log/nginx,
// /usr/share/nginx). With no http block it needs none of its temp paths
// (/var/lib/nginx).
func (d *FrontDoors) startNginx(ctx context.Context, spec NginxSpec, port int, twin *lab.Server) error {
	l := d.lab
	if spec.Workers == 0 {
		spec.Workers = defaultNginxWorkers
	}
	dir, err := l.MakeDir("nginx-" + spec.Name)
	if err != nil {
		return err
	}
	n := &Nginx{
		NginxSpec:  spec,
		Port:       port,
		ConfigFile: filepath.Join(dir, "nginx.conf"),
		PIDFile:    filepath.Join(dir, "nginx.pid"),
		LogFile:    filepath.Join(dir, "nginx.log"),
	}
	if slices.Contains(spec.Backends, TwinBackend) {
		if twin == nil {
			return fmt.Errorf("nginx %s names the twin as a backend, and there is none", spec.Name)
		}
		n.Twin = twin
	}
	if out, err := exec.CommandContext(ctx, d.nginxBin, "-v").CombinedOutput(); err == nil {
		n.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if err := l.WriteFile(n.ConfigFile, nginxConf(l, n, d.nginxModule)); err != nil {
		return err
	}
	args := []string{"-p", dir + "/", "-c", n.ConfigFile}
	if errorLogFlag(n.Version) {
		args = append(args, "-e", n.LogFile)
	}
	// Check the configuration first: its errors are clearer than a process
	// that exits.
	if _, err := l.Run(ctx, d.nginxBin, append([]string{"-t", "-q"}, args...)...); err != nil {
		if strings.Contains(err.Error(), `unknown directive "stream"`) {
			return fmt.Errorf("nginx %s: nginx has no stream module (install Debian's libnginx-mod-stream): %w", spec.Name, err)
		}
		return fmt.Errorf("nginx %s refuses the configuration the lab wrote for it (%s): %w", spec.Name, n.ConfigFile, err)
	}
	l.Logf("start nginx %s (%s, %d workers, over %s) on 127.0.0.1:%d", spec.Name, n.policyName(), spec.Workers, strings.Join(spec.Backends, ", "), port)
	pid, err := l.Spawn(dir, d.nginxBin, args, n.LogFile, n.PIDFile)
	if pid > 0 {
		d.Nginxes = append(d.Nginxes, *n)
	}
	if err != nil {
		return err
	}
	if err := lab.WaitProcess(ctx, pid, func() (bool, error) { return lab.DialOK(port), nil }, 15*time.Second); err != nil {
		return fmt.Errorf("nginx %s did not open port %d: %w\n%s", spec.Name, port, err, lab.LogTail(n.LogFile, 15))
	}
	return nil
}

// nginxConf renders n's nginx.conf: the stream module (loaded from module
// when that is not empty), one upstream of n's backends with n's policy,
// one listener, and a log line per session.
func nginxConf(l *lab.Lab, n *Nginx, module string) string {
	dir := filepath.Dir(n.ConfigFile)
	var b strings.Builder
	fmt.Fprintf(&b, "# leasectl lab: nginx %s\n", n.Name)
	if module != "" {
		fmt.Fprintf(&b, "load_module %s;\n", module)
	}
	fmt.Fprintf(&b, `worker_processes %d;
daemon off;
master_process on;
pid %s;
lock_file %s;
error_log %s info;

events {
    worker_connections 512;
}

stream {
    log_format sessions '$remote_addr:$remote_port worker $pid -> $upstream_addr status $status $session_time s';
    access_log %s sessions;

    upstream backends {
`, n.Workers, filepath.Join(dir, nginxOwnPIDFile), filepath.Join(dir, "nginx.lock"), n.LogFile, n.LogFile)
	if n.Zone {
		fmt.Fprintf(&b, "        zone %s 64k;\n", n.Name)
	}
	if p := nginxPolicies[n.Policy]; p != "" {
		fmt.Fprintf(&b, "        %s\n", p)
	}
	for _, be := range n.Backends {
		port := l.Primary.Port
		switch {
		case be == "standby" && l.Standby != nil:
			port = l.Standby.Port
		case be == TwinBackend && n.Twin != nil:
			port = n.Twin.Port
		}
		fmt.Fprintf(&b, "        server 127.0.0.1:%d;\n", port)
	}
	fmt.Fprintf(&b, `    }

    server {
        listen 127.0.0.1:%d;
        proxy_pass backends;
    }
}
`, n.Port)
	return b.String()
}

// errorLogFlag reports whether the nginx of version (what `nginx -v`
// prints) has -e, which came with nginx 1.19.5; when the version is not
// known, it assumes so. Without -e, an nginx built to log to a file it may
// not open only warns (an alert) until it reads nginx.conf.
func errorLogFlag(version string) bool {
	_, v, ok := strings.Cut(version, "nginx/")
	if !ok {
		return true
	}
	var major, minor, patch int
	if n, _ := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch); n < 2 {
		return true
	}
	return major > 1 || (major == 1 && (minor > 19 || (minor == 19 && patch >= 5)))
}

// nginxOwnPIDFile is the name of the pid file nginx writes itself (the
// `pid` directive), in its directory; the lab's is Nginx.PIDFile.
const nginxOwnPIDFile = "nginx-master.pid"

// policyName is n's policy as Status and the lab's log show it.
func (n *Nginx) policyName() string {
	p := n.Policy
	if p == "" {
		p = "round robin"
	}
	if n.Zone {
		p += ", zone"
	}
	return p
}

// NginxDSN is the named nginx instance over TCP, as the superuser; empty
// when the lab has no such instance.
func (d *FrontDoors) NginxDSN(name string) string {
	if n := d.Nginx(name); n != nil {
		return d.lab.DSN(n.Port, d.lab.User, "postgres")
	}
	return ""
}

// Nginx returns the named nginx instance, or nil.
func (d *FrontDoors) Nginx(name string) *Nginx {
	for i := range d.Nginxes {
		if d.Nginxes[i].Name == name {
			return &d.Nginxes[i]
		}
	}
	return nil
}

// NginxPID returns the pid of a running nginx instance's master process,
// or 0.
func NginxPID(n *Nginx) int { return lab.PIDFromFile(n.PIDFile) }

// checkNginx rejects nginx instances that cannot work in a lab with opts;
// haproxy are the lab's HAProxy instances, whose names the nginx
// instances may not take.
func checkNginx(specs []NginxSpec, haproxy []HAProxySpec, opts lab.Options) error {
	seen := map[string]bool{}
	for _, h := range haproxy {
		seen[h.Name] = true
	}
	for _, n := range specs {
		if !isFrontDoorName(n.Name) {
			return fmt.Errorf("lab options: nginx name %q: use 1 to 40 letters, digits, '_', '.' or '-', starting with a letter or digit", n.Name)
		}
		if seen[n.Name] {
			return fmt.Errorf("lab options: two nginx or HAProxy instances are called %q: give each its own name", n.Name)
		}
		seen[n.Name] = true
		if len(n.Backends) == 0 {
			return fmt.Errorf("lab options: nginx %s has no Backends: list \"primary\", \"standby\" or %q", n.Name, TwinBackend)
		}
		for _, b := range n.Backends {
			switch b {
			case "primary", TwinBackend:
			case "standby":
				if !opts.Standby {
					return fmt.Errorf("lab options: nginx %s has the standby as a backend, and the lab has none (set Standby: true)", n.Name)
				}
			default:
				return fmt.Errorf("lab options: nginx %s: backend %q is neither \"primary\" nor \"standby\", nor %q (a second, unrelated primary)", n.Name, b, TwinBackend)
			}
		}
		if _, ok := nginxPolicies[n.Policy]; !ok {
			return fmt.Errorf("lab options: nginx %s: Policy %q: use \"\" (round robin), \"least_conn\", \"random\" or \"hash\" (hash $remote_addr)", n.Name, n.Policy)
		}
		if n.Workers < 0 || n.Workers > maxNginxWorkers {
			return fmt.Errorf("lab options: nginx %s: Workers %d is out of range: use 0 (%d) or 1 to %d", n.Name, n.Workers, defaultNginxWorkers, maxNginxWorkers)
		}
	}
	return nil
}
