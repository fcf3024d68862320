//go:build linux

package schedule

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// The network partition of one replica, as the fault suite (test/chaos)
// makes it: its own names and nftables table, the same lock on the choice
// of a subnet, so that the two suites can run at once on one host.

// HBA admits clients from any namespace's subnet (a pg_hba.conf line):
// every Netns picks a /24 of its own inside 10.0.0.0/8.
const HBA = "host all all 10.0.0.0/8 scram-sha-256"

const (
	nsPrefix  = "leasectl-sched-" // + id
	vethPref  = "lcs"             // + id (+ "n" for the namespace's end): within IFNAMSIZ
	nftTable  = "leasectl_sched"
	toolsHint = "install iproute2 and nftables (scripts/lib.sh installs them when missing)"
)

// Netns is a network namespace joined to this host by a veth pair, so that
// a process in it reaches PostgreSQL at HostAddr over a path that Cut can
// sever without touching anyone else's traffic. Its names carry an id made
// of this process's pid and a sequence number ("1234_1"): two Netns of one
// process, or of two suites running at once, never share a name, and a run
// killed before its cleanup is recognised and removed by the next one.
type Netns struct {
	// Name is the namespace, as `ip netns exec` takes it.
	Name string
	// HostIf and NSIf are the veth pair's ends.
	HostIf, NSIf string
	// HostAddr is the host's end of the pair, where PostgreSQL listens for
	// the namespace; NSAddr is the namespace's end. They are .1 and .2 of a
	// /24 picked at random in 10.0.0.0/8 and not in use on this host, so
	// that suites running at the same time do not collide.
	HostAddr, NSAddr string
	cut              bool
}

// NewNetns creates the namespace and the veth pair, with HostAddr on this
// host's end and NSAddr on the namespace's. It needs root; it fails, saying
// so, otherwise.
func NewNetns() (n *Netns, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a network partition needs root (network namespaces, veth pairs and nftables rules are privileged): run the suite as root, as CI does")
	}
	for _, name := range []string{"ip", "nft"} {
		if tool(name) == name {
			return nil, fmt.Errorf("%s not found: %s", name, toolsHint)
		}
	}
	removeStale()
	// The subnet is free once no interface has an address in it; until
	// this Netns has put HostAddr on its end, another one (of this
	// process or of another suite) could pick the same.
	unlock, err := lockSubnets()
	if err != nil {
		return nil, err
	}
	defer unlock()
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	id := fmt.Sprintf("%d_%d", os.Getpid(), netnsSeq.Add(1))
	n = &Netns{Name: nsPrefix + id, HostIf: vethPref + id, NSIf: vethPref + id + "n",
		HostAddr: subnet + ".1", NSAddr: subnet + ".2"}
	if len(n.NSIf) > maxIfName {
		return nil, fmt.Errorf("interface name %s is longer than %d characters", n.NSIf, maxIfName)
	}
	defer func() {
		if err != nil {
			_ = n.Close()
			n = nil
		}
	}()
	steps := [][]string{
		{"ip", "netns", "add", n.Name},
		{"ip", "link", "add", n.HostIf, "type", "veth", "peer", "name", n.NSIf, "netns", n.Name},
		{"ip", "addr", "add", n.HostAddr + "/24", "dev", n.HostIf},
		{"ip", "link", "set", n.HostIf, "up"},
		{"ip", "-n", n.Name, "addr", "add", n.NSAddr + "/24", "dev", n.NSIf},
		{"ip", "-n", n.Name, "link", "set", n.NSIf, "up"},
		{"ip", "-n", n.Name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(nil, s...); err != nil {
			return n, err
		}
	}
	return n, nil
}

// netnsSeq numbers the Netns of this process.
var netnsSeq atomic.Int64

// maxIfName is the longest interface name Linux takes (IFNAMSIZ - 1).
const maxIfName = 15

// lockSubnets takes an exclusive lock, shared by every process on this
// host (the fault suite's too: the same file), for picking a subnet and
// assigning it. flock locks belong to the
// open file, so two Netns of one process exclude each other too. The lock
// file's path is fixed, not under $TMPDIR, for every suite to share it.
func lockSubnets() (unlock func(), err error) {
	const name = "/tmp/leasectl-chaos-subnets.lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the choice of a subnet: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the choice of a subnet: %w", err)
	}
	return func() { f.Close() }, nil
}

// Command returns cmd prepared to run name inside the namespace. `ip netns
// exec` execs name in place, so the process's pid is name's.
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command(tool("ip"), append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Cut drops every packet between the namespace and HostAddr, both ways,
// with an nftables table inside the namespace: no FIN, no RST, nothing
// reaches either side, as in a real partition.
func (n *Netns) Cut() error {
	rules := "table inet " + nftTable + " {\n" +
		"  chain input { type filter hook input priority 0; policy accept; ip saddr " + n.HostAddr + " drop; }\n" +
		"  chain output { type filter hook output priority 0; policy accept; ip daddr " + n.HostAddr + " drop; }\n}\n"
	if err := run([]byte(rules), "ip", "netns", "exec", n.Name, "nft", "-f", "-"); err != nil {
		return err
	}
	n.cut = true
	return nil
}

// Heal removes the drop rules of Cut; it does nothing when there are none.
func (n *Netns) Heal() error {
	if !n.cut {
		return nil
	}
	if err := run(nil, "ip", "netns", "exec", n.Name, "nft", "delete", "table", "inet", nftTable); err != nil {
		return err
	}
	n.cut = false
	return nil
}

// Close heals the partition and removes the veth pair and the namespace.
// Processes still inside the namespace must be gone first.
func (n *Netns) Close() error {
	return errors.Join(n.Heal(),
		ignoreMissing(run(nil, "ip", "link", "del", n.HostIf)),
		ignoreMissing(run(nil, "ip", "netns", "del", n.Name)))
}

// removeStale removes the namespaces and veth pairs of runs whose process
// is gone (killed before their cleanup ran).
func removeStale() {
	out, err := exec.Command(tool("ip"), "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		id, ok := strings.CutPrefix(name, nsPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(id, "_")
		if p, err := strconv.Atoi(pid); err != nil || syscall.Kill(p, 0) == nil {
			continue // not ours, or its run is alive
		}
		_ = run(nil, "ip", "link", "del", vethPref+id)
		_ = run(nil, "ip", "netns", "del", name)
	}
}

// DSN returns dsn (one of the lab's, on 127.0.0.1) with the host replaced by
// HostAddr, for a client inside the namespace.
func (n *Netns) DSN(dsn string) string {
	return strings.Replace(dsn, "@127.0.0.1:", "@"+n.HostAddr+":", 1)
}

// freeSubnet picks the first three octets of a /24 in 10.0.0.0/8 that no
// interface of this host has an address in.
func freeSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("list this host's addresses: %w", err)
	}
	for range 100 {
		subnet := fmt.Sprintf("10.%d.%d", 100+rand.IntN(155), rand.IntN(256))
		probe := net.ParseIP(subnet + ".1")
		taken := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (ipn.Contains(probe) || strings.HasPrefix(ipn.IP.String(), subnet+".")) {
				taken = true
			}
		}
		if !taken {
			return subnet, nil
		}
	}
	return "", errors.New("no free /24 found in 10.100.0.0-10.254.255.0 (see `ip -br addr`)")
}

// tool returns the path of an administration program, which may live in
// /usr/sbin or /sbin outside a non-root PATH; name itself when not found.
func tool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin/", "/sbin/"} {
		if _, err := os.Stat(dir + name); err == nil {
			return dir + name
		}
	}
	return name
}

// errMissing marks a failure to delete something that is not there.
var errMissing = errors.New("not there")

func ignoreMissing(err error) error {
	if errors.Is(err, errMissing) {
		return nil
	}
	return err
}

// run runs argv with stdin, returning its output in the error.
func run(stdin []byte, argv ...string) error {
	c := exec.Command(tool(argv[0]), argv[1:]...)
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	out, err := c.CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if strings.Contains(msg, "Cannot find device") || strings.Contains(msg, "No such file or directory") {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), errMissing, msg)
	}
	return fmt.Errorf("%s: %w: %s (%s)", strings.Join(argv, " "), err, msg, toolsHint)
}
