//go:build linux

package chaos

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestNetns: the namespace reaches its HostAddr until Cut, again after Heal;
// Close removes the namespace, the veth pair and the address; and a new
// Netns removes what a run killed before its cleanup left behind.
func TestNetns(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := strconv.Itoa(dead.Process.Pid) + "_1"
	for _, argv := range [][]string{
		{"ip", "netns", "add", nsPrefix + stale},
		{"ip", "link", "add", vethPref + stale, "type", "veth", "peer", "name", vethPref + stale + "n", "netns", nsPrefix + stale},
	} {
		if err := run(nil, argv...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = run(nil, "ip", "link", "del", vethPref+stale)
		_ = run(nil, "ip", "netns", "del", nsPrefix+stale)
	})

	ns, err := NewNetns()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			ns.Close()
		}
	})
	if namespaces(t)[nsPrefix+stale] || linkExists(vethPref+stale) {
		t.Errorf("the leftovers of pid %s are still there", stale)
	}

	dial := dialer(t, ns)
	if err := dial(); err != nil {
		t.Fatalf("from the namespace, before the cut: %v", err)
	}
	if err := ns.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err == nil {
		t.Error("the namespace reached the host through the cut")
	}
	if err := ns.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err != nil {
		t.Errorf("from the namespace, after healing: %v", err)
	}

	if err := ns.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if namespaces(t)[ns.Name] || linkExists(ns.HostIf) || inUse(ns.HostAddr) {
		t.Errorf("after Close: namespace %s listed %v, link %s exists %v, %s assigned %v",
			ns.Name, namespaces(t)[ns.Name], ns.HostIf, linkExists(ns.HostIf), ns.HostAddr, inUse(ns.HostAddr))
	}
}

// TestNetnsAtOnce: two partitions made at the same time, as two suites on
// one machine (or two tests of one suite) make them, get names and subnets
// of their own, and cutting one leaves the other's path alone.
func TestNetnsAtOnce(t *testing.T) {
	var nss [2]*Netns
	var errs [2]error
	var wg sync.WaitGroup
	for i := range nss {
		wg.Go(func() { nss[i], errs[i] = NewNetns() })
	}
	wg.Wait()
	for i, ns := range nss {
		if ns != nil {
			t.Cleanup(func() { ns.Close() })
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	a, b := nss[0], nss[1]
	subnet := func(addr string) string { return addr[:strings.LastIndex(addr, ".")] }
	if a.Name == b.Name || a.HostIf == b.HostIf || a.NSIf == b.NSIf || subnet(a.HostAddr) == subnet(b.HostAddr) {
		t.Fatalf("two partitions share a name or a subnet: %+v and %+v", a, b)
	}
	dialA, dialB := dialer(t, a), dialer(t, b)
	if err := dialA(); err != nil {
		t.Fatalf("from %s: %v", a.Name, err)
	}
	if err := dialB(); err != nil {
		t.Fatalf("from %s: %v", b.Name, err)
	}
	if err := a.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := dialA(); err == nil {
		t.Errorf("%s reached its host address through the cut", a.Name)
	}
	if err := dialB(); err != nil {
		t.Errorf("cutting %s cut %s too: %v", a.Name, b.Name, err)
	}
	for _, ns := range nss {
		if err := ns.Close(); err != nil {
			t.Error(err)
		}
	}
	for _, ns := range nss {
		if namespaces(t)[ns.Name] || linkExists(ns.HostIf) || inUse(ns.HostAddr) {
			t.Errorf("after Close, %s is left: %+v", ns.Name, ns)
		}
	}
}

// dialer listens on ns.HostAddr and returns a function that connects to it
// from inside the namespace (the test binary run there, see TestMain).
func dialer(t *testing.T, ns *Netns) func() error {
	t.Helper()
	ln, err := net.Listen("tcp", ns.HostAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return func() error {
		cmd := ns.Command(os.Args[0])
		cmd.Env = append(os.Environ(), dialEnv+"="+ln.Addr().String())
		_, err := cmd.CombinedOutput()
		return err
	}
}

func namespaces(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(tool("ip"), "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		m[name] = true
	}
	return m
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}
