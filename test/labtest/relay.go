package labtest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
)

// ---- relays ----

// startRelay starts socat listening on a unix socket of its own directory
// and forwarding each connection to the primary's TCP port.
func (d *FrontDoors) startRelay(ctx context.Context, name string) error {
	l := d.lab
	dir, err := l.MakeDir("relay-" + name)
	if err != nil {
		return err
	}
	r := &Relay{
		Name:      name,
		SocketDir: dir,
		Port:      relayPort,
		Socket:    filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(relayPort)),
		PIDFile:   filepath.Join(dir, "socat.pid"),
		LogFile:   filepath.Join(dir, "socat.log"),
	}
	if len(r.Socket) > lab.MaxSocketPath {
		return fmt.Errorf("relay %s: its socket path %s is longer than the %d bytes a unix socket may have: use a shorter relay name or a shorter TMPDIR", name, r.Socket, lab.MaxSocketPath)
	}
	l.Logf("start socat relay %s: %s -> 127.0.0.1:%d", name, r.Socket, l.Primary.Port)
	// fork: a process per connection; backlog: socat's default of 5 makes
	// connects fail at once (EAGAIN) under a burst; nodelay: no Nagle delay
	// on the relay's side of small messages.
	args := []string{"-d",
		"UNIX-LISTEN:" + r.Socket + ",fork,backlog=128",
		"TCP:127.0.0.1:" + strconv.Itoa(l.Primary.Port) + ",nodelay"}
	pid, err := l.Spawn(dir, d.socatBin, args, r.LogFile, r.PIDFile)
	if pid > 0 {
		d.Relays = append(d.Relays, *r)
	}
	if err != nil {
		return err
	}
	if err := lab.WaitProcess(ctx, pid, func() (bool, error) { return dialUnixOK(r.Socket), nil }, 15*time.Second); err != nil {
		return fmt.Errorf("relay %s did not open %s: %w\n%s", name, r.Socket, err, lab.LogTail(r.LogFile, 15))
	}
	return nil
}

// RelayDSN is the named relay's unix socket, as the superuser, in
// key=value form as SocketDSN is; empty when the lab has no such relay.
func (d *FrontDoors) RelayDSN(name string) string {
	r := d.Relay(name)
	if r == nil {
		return ""
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable passfile=%s",
		r.SocketDir, r.Port, d.lab.User, d.lab.PassFile)
}

// Relay returns the named relay, or nil.
func (d *FrontDoors) Relay(name string) *Relay {
	for i := range d.Relays {
		if d.Relays[i].Name == name {
			return &d.Relays[i]
		}
	}
	return nil
}

// RelayPID returns the pid of a running relay's listening socat, or 0.
func RelayPID(r *Relay) int { return lab.PIDFromFile(r.PIDFile) }

func dialUnixOK(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
