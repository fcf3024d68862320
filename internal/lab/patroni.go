package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

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

// PatroniPID returns the pid of n's running Patroni, or 0.
func PatroniPID(n *HANode) int { return PIDFromFile(n.PIDFile) }

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
