package lab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// Ports are picked by asking the kernel for free loopback ports, but a
// server binds its port only later (after initdb, seconds on), and a
// restarted server leaves it free for a while: another lab starting then,
// a test package or a second suite on the same host, could be handed the
// same port. So every lab records the ports it picked in a directory that
// all labs of this host share, one file per port holding the lab's RunDir,
// and picks none that another lab recorded. A record is stale once its
// RunDir is gone (Stop removes it); Stop removes the lab's own records.
//
// The registry is a help, not a requirement: when it cannot be used (another
// user's directory, say), the lab takes the kernel's ports as before.

// portRegistryDir is the directory of port records: a fixed path, not
// under $TMPDIR, so that labs started with different temporary directories
// still see each other's records.
var portRegistryDir = "/tmp/leasectl-lab-ports"

func portRegistry() string { return portRegistryDir }

// reservePorts returns n free loopback ports that no other lab of this host
// has reserved, and records them for runDir.
func reservePorts(runDir string, n int) ([]int, error) {
	reg := portRegistry()
	unlock, err := lockRegistry(reg)
	if err != nil {
		return freePorts(n, nil) // no registry: the kernel's word alone
	}
	defer unlock()
	taken := map[int]bool{}
	entries, _ := os.ReadDir(reg)
	for _, e := range entries {
		port, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		owner, err := os.ReadFile(filepath.Join(reg, e.Name()))
		if err == nil && len(owner) > 0 {
			if _, err := os.Stat(string(owner)); err == nil {
				taken[port] = true
				continue
			}
		}
		_ = os.Remove(filepath.Join(reg, e.Name())) // its lab is gone
	}
	ports, err := freePorts(n, taken)
	if err != nil {
		return nil, err
	}
	for _, p := range ports {
		_ = os.WriteFile(filepath.Join(reg, strconv.Itoa(p)), []byte(runDir), 0o644)
	}
	return ports, nil
}

// releasePorts removes the records of ports that runDir holds.
func releasePorts(runDir string, ports []int) {
	reg := portRegistry()
	for _, p := range ports {
		name := filepath.Join(reg, strconv.Itoa(p))
		if owner, err := os.ReadFile(name); err == nil && string(owner) == runDir {
			_ = os.Remove(name)
		}
	}
}

// lockRegistry creates the registry when missing (writable by every user,
// sticky, as /tmp is) and takes its lock.
func lockRegistry(reg string) (unlock func(), err error) {
	if err := os.Mkdir(reg, 0o700); err == nil {
		if err := os.Chmod(reg, os.ModeSticky|0o777); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(reg, ".lock"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// freePorts asks the kernel for n free loopback ports, none of them in
// skip: all listeners stay open until all are picked, so the n differ.
func freePorts(n int, skip map[int]bool) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > n+1000 {
			return nil, fmt.Errorf("find a free loopback port: the kernel offers only ports that other labs reserved (see %s)", portRegistry())
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free loopback port: %w", err)
		}
		ls = append(ls, ln)
		if p := ln.Addr().(*net.TCPAddr).Port; !skip[p] {
			ports = append(ports, p)
		}
	}
	return ports, nil
}
