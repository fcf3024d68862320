package probe_test

import (
	"os"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/lab"
	"github.com/leasectl/leasectl/test/labtest"
	"github.com/leasectl/leasectl/test/pgtest"
)

var testLab *lab.Lab

// doors are testLab's front doors: they spread sessions or statements over
// servers, cut idle sessions, or carry a unix socket over TCP.
var doors = labtest.New(labtest.Spec{
	PgPool: &labtest.PgPoolSpec{},
	HAProxy: []labtest.HAProxySpec{
		{Name: "rr", Backends: []string{"primary", "standby"}},
		{Name: "idle", Backends: []string{"primary"}, TimeoutClient: 2 * time.Second},
		// Split brain: the primary and a second primary that shares
		// nothing with it, behind one address.
		{Name: "split", Backends: []string{"primary", labtest.TwinBackend}, Balance: "leastconn"},
		{Name: "split-rr", Backends: []string{"primary", labtest.TwinBackend}},
		{Name: "split-random", Backends: []string{"primary", labtest.TwinBackend}, Balance: "random"},
	},
	// nginx's stream proxy over the primary and the twin: round robin
	// kept per worker process (no zone), shared (zone), and by client
	// address.
	Nginx: []labtest.NginxSpec{
		{Name: "nginx-rr", Backends: []string{"primary", labtest.TwinBackend}},
		{Name: "nginx-zone", Backends: []string{"primary", labtest.TwinBackend}, Zone: true},
		{Name: "nginx-hash", Backends: []string{"primary", labtest.TwinBackend}, Policy: "hash"},
	},
	Relays: []string{"cloudsql"},
})

func TestMain(m *testing.M) {
	os.Exit(pgtest.RunMain(m, lab.Options{
		Standby:    true,
		Extensions: []lab.Extension{doors},
		Poolers: append(lab.EveryPoolMode,
			// PgBouncer in session mode that hands server connections on
			// without resetting them: locks outlive their client.
			lab.PoolerSpec{Name: "noreset", Mode: lab.Session, PoolSize: 5, Settings: map[string]string{"server_reset_query": ""}},
			// PgBouncer that admits one client at a time.
			lab.PoolerSpec{Name: "oneclient", Mode: lab.Session, PoolSize: 5, Settings: map[string]string{"max_client_conn": "1"}},
			// PgBouncer in session mode that reaches the primary by its
			// unix socket, while its clients use TCP.
			lab.PoolerSpec{Name: "sessionsock", Mode: lab.Session, PoolSize: 5, ServerSocket: true}),
	}, &testLab))
}
