package lab

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func testHALab() *Lab {
	l := &Lab{User: "postgres", RunDir: "/run/lab", Bin: Binaries{Postgres: "/usr/lib/postgresql/15/bin/postgres"},
		Settings: map[string]string{"application_name": "'it''s'", "work_mem": "8MB"}, HBA: []string{"host all all 10.0.0.0/8 scram-sha-256"}}
	l.HA = &HA{HASpec: HASpec{}.withDefaults(), Scope: haScope, Etcd: EtcdMember{ClientPort: 2379}}
	for i, name := range []string{"node1", "node2"} {
		l.HA.Nodes = append(l.HA.Nodes, HANode{Name: name, Server: Server{Port: 5432 + i, DataDir: "/run/lab/" + name + "/data",
			SocketDir: "/run/lab/" + name + "/sock", LogFile: "/run/lab/" + name + "/postgresql.log"},
			RESTPort: 8008 + i, ConfigFile: "/run/lab/" + name + "/patroni.yml"})
	}
	l.HA.Router = HARouter{PrimaryPort: 5000, ReplicaPort: 5001, StatsSocket: "/run/lab/haproxy-ha/stats.sock"}
	return l
}

// TestPatroniConf: the settings that must match on every node are in
// bootstrap.dcs, where Patroni takes them from; the lab's Settings lose
// their postgresql.conf quotes; the HBA lines and the passwords are there.
func TestPatroniConf(t *testing.T) {
	l := testHALab()
	text, err := l.patroniConf(&l.HA.Nodes[1], "su-secret", "repl-secret")
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name      string
		Etcd3     struct{ Hosts []string }
		Bootstrap struct {
			DCS struct {
				TTL        int `yaml:"ttl"`
				LoopWait   int `yaml:"loop_wait"`
				Postgresql struct {
					UsePgRewind bool           `yaml:"use_pg_rewind"`
					Parameters  map[string]any `yaml:"parameters"`
				}
			} `yaml:"dcs"`
		}
		Postgresql struct {
			Listen         string
			Parameters     map[string]any
			PgHBA          []string `yaml:"pg_hba"`
			Authentication map[string]map[string]string
		}
	}
	if err := yaml.Unmarshal([]byte(text), &conf); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if conf.Name != "node2" || conf.Postgresql.Listen != "127.0.0.1:5433" || len(conf.Etcd3.Hosts) != 1 || conf.Etcd3.Hosts[0] != "127.0.0.1:2379" {
		t.Errorf("identity: %+v", conf)
	}
	if conf.Bootstrap.DCS.TTL != 10 || conf.Bootstrap.DCS.LoopWait != 1 || !conf.Bootstrap.DCS.Postgresql.UsePgRewind || conf.Bootstrap.DCS.Postgresql.Parameters["max_connections"] != 300 {
		t.Errorf("bootstrap.dcs: %+v", conf.Bootstrap.DCS)
	}
	if _, ok := conf.Postgresql.Parameters["max_connections"]; ok {
		t.Error("max_connections among the node's own parameters, where Patroni ignores it")
	}
	if got := conf.Postgresql.Parameters["application_name"]; got != "it's" {
		t.Errorf("application_name = %q, want it's (Patroni adds the quotes)", got)
	}
	if got := conf.Postgresql.Parameters["work_mem"]; got != "8MB" {
		t.Errorf("work_mem = %v", got)
	}
	if !strings.Contains(strings.Join(conf.Postgresql.PgHBA, "\n"), "host all all 10.0.0.0/8 scram-sha-256") {
		t.Errorf("the lab's HBA line is missing: %v", conf.Postgresql.PgHBA)
	}
	if conf.Postgresql.Authentication["superuser"]["password"] != "su-secret" || conf.Postgresql.Authentication["replication"]["username"] != haReplicationUser {
		t.Errorf("authentication: %v", conf.Postgresql.Authentication)
	}
}

// TestHARouterConf: both listeners check every node through Patroni's REST
// port with the recorded check settings.
func TestHARouterConf(t *testing.T) {
	l := testHALab()
	l.HA.CheckInterval = 300 * time.Millisecond
	conf := l.haRouterConf()
	for _, want := range []string{
		"listen primary\n    bind 127.0.0.1:5000\n", "option httpchk OPTIONS /primary\n",
		"listen replicas\n    bind 127.0.0.1:5001\n", "option httpchk OPTIONS /replica\n",
		"http-check expect status 200\n", "timeout check 1000ms\n",
		"default-server inter 300ms fastinter 150ms downinter 60ms fall 2 rise 1 on-marked-down shutdown-sessions\n",
		"server node1 127.0.0.1:5432 check port 8008\n", "server node2 127.0.0.1:5433 check port 8009\n",
		"stats socket /run/lab/haproxy-ha/stats.sock mode 600 level user\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", strings.TrimSpace(want), conf)
		}
	}
	if l.HA.Router.Checks != "inter 300ms fastinter 150ms downinter 60ms fall 2 rise 1 on-marked-down shutdown-sessions" || l.HA.Router.CheckTimeout != "1000ms" {
		t.Errorf("check settings not recorded: %q, %q", l.HA.Router.Checks, l.HA.Router.CheckTimeout)
	}
}
