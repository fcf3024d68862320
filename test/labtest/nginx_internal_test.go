package labtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/lab"
)

// TestNginxConf: the module loaded when there is one, the zone and the
// policy in the upstream, one server line per backend (repeats included),
// every path in the instance's directory.
func TestNginxConf(t *testing.T) {
	l := &lab.Lab{Primary: lab.Server{Port: 1001}, Standby: &lab.Server{Port: 1002}}
	n := &Nginx{NginxSpec: NginxSpec{Name: "x", Backends: []string{"primary", "standby", "twin", "primary"}, Policy: "hash", Zone: true, Workers: 3},
		Port: 1003, ConfigFile: "/run/lab/nginx-x/nginx.conf", LogFile: "/run/lab/nginx-x/nginx.log", Twin: &lab.Server{Port: 1004}}
	conf := nginxConf(l, n, "/usr/lib/nginx/modules/ngx_stream_module.so")
	for _, want := range []string{"load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n", "worker_processes 3;\n", "daemon off;\n", "master_process on;\n",
		"pid /run/lab/nginx-x/nginx-master.pid;\n", "lock_file /run/lab/nginx-x/nginx.lock;\n", "error_log /run/lab/nginx-x/nginx.log info;\n",
		"worker_connections 512;\n", "zone x 64k;\n", "hash $remote_addr;\n", "listen 127.0.0.1:1003;\n", "proxy_pass backends;\n",
		"server 127.0.0.1:1001;\n        server 127.0.0.1:1002;\n        server 127.0.0.1:1004;\n        server 127.0.0.1:1001;\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", strings.TrimSpace(want), conf)
		}
	}
	if strings.Contains(conf, "user ") || strings.Contains(conf, "/var/") {
		t.Errorf("nginx.conf names a user or a path under /var:\n%s", conf)
	}

	n.Policy, n.Zone = "", false
	conf = nginxConf(l, n, "")
	for _, unwanted := range []string{"load_module", "zone", "hash", "least_conn", "random"} {
		if strings.Contains(conf, unwanted) {
			t.Errorf("round robin without zone and a built-in module, nginx.conf has %q:\n%s", unwanted, conf)
		}
	}
}

// TestFindStreamModule: a stream module built in needs no load_module; a
// dynamic one is found under --modules-path; without one the error names
// Debian's package.
func TestFindStreamModule(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, configure string) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\necho 'nginx version: nginx/1.22.1' >&2\necho 'configure arguments: " + configure + "' >&2\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saved := nginxModuleDirs
	nginxModuleDirs = []string{filepath.Join(dir, "nowhere")}
	defer func() { nginxModuleDirs = saved }()

	if m, err := findStreamModule(fake("static", "--prefix=/x --with-stream --with-stream_ssl_module")); m != "" || err != nil {
		t.Errorf("built-in stream module: %q, %v; want \"\", nil", m, err)
	}
	modules := filepath.Join(dir, "modules")
	if err := os.MkdirAll(modules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(modules, nginxStreamModule), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := findStreamModule(fake("dynamic", "--modules-path="+modules+" --with-stream=dynamic")); m != filepath.Join(modules, nginxStreamModule) || err != nil {
		t.Errorf("dynamic stream module: %q, %v; want %s", m, err, filepath.Join(modules, nginxStreamModule))
	}
	_, err := findStreamModule(fake("missing", "--modules-path="+filepath.Join(dir, "empty")+" --with-stream=dynamic"))
	if err == nil || !strings.Contains(err.Error(), "libnginx-mod-stream") || !strings.Contains(err.Error(), filepath.Join(dir, "empty")) {
		t.Errorf("no stream module: %v; want an error naming libnginx-mod-stream and the places searched", err)
	}
}

// TestErrorLogFlag: -e from nginx 1.19.5 on, and when the version is not
// known.
func TestErrorLogFlag(t *testing.T) {
	for v, want := range map[string]bool{
		"nginx version: nginx/1.22.1": true, "nginx version: nginx/1.19.5": true, "nginx version: nginx/1.19.4": false,
		"nginx version: nginx/1.18.0 (Ubuntu)": false, "nginx version: nginx/2.0": true, "nginx version: openresty/1.21.4.1": true, "": true,
	} {
		if got := errorLogFlag(v); got != want {
			t.Errorf("errorLogFlag(%q) = %v, want %v", v, got, want)
		}
	}
}
