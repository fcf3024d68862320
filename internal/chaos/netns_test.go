//go:build linux

package chaos

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	stale := strconv.Itoa(dead.Process.Pid)
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

	ln, err := net.Listen("tcp", ns.HostAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial := func() error {
		cmd := ns.Command(os.Args[0])
		cmd.Env = append(os.Environ(), dialEnv+"="+ln.Addr().String())
		_, err := cmd.CombinedOutput()
		return err
	}
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
