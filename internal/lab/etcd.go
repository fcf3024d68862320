package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

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

// EtcdPID returns the pid of the running etcd member, or 0.
func EtcdPID(e *EtcdMember) int { return PIDFromFile(e.PIDFile) }

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
