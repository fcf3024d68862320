package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasectl/leasectl/internal/dbconn"
	"github.com/leasectl/leasectl/internal/errkind"
	"github.com/leasectl/leasectl/internal/term"
	"github.com/spf13/cobra"
)

// termRecordObjects names what the term record is, for messages.
const termRecordObjects = "schema leasectl (leasectl.term, leasectl.term_history)"

func newFenceCmd(app *App) *cobra.Command {
	c := &cobra.Command{
		Use:   "fence",
		Short: "Prepare a lease's database for fencing: the term record",
		Long: `The fence commands create what fencing needs in the lease's own database.

That is the term record, the schema leasectl: one row per role for its
current term (leasectl.term), one per term for its history
(leasectl.term_history), and leasectl.fence(token), which a program runs in
its own transactions to have the database refuse its writes once a newer
term has begun. A lease records each leadership there as a term:
who led, from when to when, how it ended. A session-level advisory lock dies
with its session; a row does not. So a new leader waits until the previous
term has ended before its work starts, even when the server ended every
session of the old leader at once (a restart, pg_terminate_backend by
application name), which the lock alone cannot tell it. leasectl history
reads the record; leasectl run --fence gives the program its term's token
(LEASECTL_FENCE_TOKEN).

leasectl run creates the record itself when its role may; "fence init"
creates it ahead of time, as a role that may, or prints its SQL for your
migrations.`,
		Example: `  leasectl fence init                 # as the database owner
  leasectl fence init --print-sql > migrations/0042_leasectl.sql`,
		Args: noArgs,
		RunE: parentRunE,
	}
	c.AddCommand(newFenceInitCmd(app, nil))
	return c
}

type fenceInitOptions struct {
	app      *App
	PrintSQL bool
}

// newFenceInitCmd builds `leasectl fence init`; runF, when not nil, runs
// instead of runFenceInit with the parsed and checked options (tests).
func newFenceInitCmd(app *App, runF func(*fenceInitOptions) error) *cobra.Command {
	opts := &fenceInitOptions{app: app}
	c := &cobra.Command{
		Use:   "init",
		Short: "Create the term record (schema leasectl) in the lease's database",
		Long: `Create the term record, the schema leasectl with its tables leasectl.term
and leasectl.term_history and the function leasectl.fence, in the database
of the DSN: the database the
leases of your roles use (see leasectl fence --help for what it is for).

It is idempotent: when the record exists already, init says so and exits 0.
The statements run in one transaction, under a lock that serialises them
with leases creating the record at the same moment.

Creating a schema needs the CREATE privilege on the database: run init as
the database owner (or a role granted CREATE on it). Without it init exits
3 and says which privilege is missing. When the record exists but the role
may not read and write it, init exits 3 with the GRANT it needs.

--print-sql prints the SQL instead, and connects to nothing: for teams whose
migrations create every object. Leases need SELECT, INSERT, UPDATE and
DELETE on both tables, and USAGE on the schema.`,
		Example: `  leasectl fence init
  leasectl fence init --dsn "postgres://owner@db1.internal/app" -o json
  leasectl fence init --print-sql > migrations/0042_leasectl.sql`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return runFenceInit(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.PrintSQL, "print-sql", false, "print the SQL that creates the term record, and exit without connecting")
	return c
}

// validate checks the flags, before anything is connected.
func (opts *fenceInitOptions) validate() error {
	if opts.PrintSQL && opts.app.JSON() {
		return usageErrorf("--print-sql prints SQL, which has no JSON form: drop -o json")
	}
	return nil
}

// fenceInitJSON is the documented schema of `leasectl fence init -o json`
// (docs/json.md).
type fenceInitJSON struct {
	docHeader
	Created  bool   `json:"created"`
	Schema   string `json:"schema"`
	Database string `json:"database"`
}

func runFenceInit(ctx context.Context, opts *fenceInitOptions) error {
	app := opts.app
	if opts.PrintSQL {
		_, err := io.WriteString(app.IO.Out, term.DDL)
		return err
	}
	conn, err := app.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	sctx, cancel := context.WithTimeout(ctx, app.Global.Timeout)
	defer cancel()
	server, err := dbconn.Server(sctx, conn)
	if err != nil {
		return err
	}
	if server.InRecovery {
		return &InputError{Err: fmt.Errorf("this server is a standby (in recovery), where nothing can be created: point --dsn at the primary of database %s", server.Database)}
	}
	st, err := term.Check(sctx, conn)
	if err != nil {
		return err
	}
	switch st {
	case term.NoPrivilege, term.ReadOnly:
		return errkind.Mark(fmt.Errorf("the term record, %s, exists in database %s, but role %q may not read and write it (a lease running as it goes without it): "+
			"as the owner of schema leasectl, run: %s", termRecordObjects, server.Database, server.User, term.GrantSQL(server.User)), errkind.Unavailable)
	case term.Missing:
		if err := term.Create(sctx, conn); err != nil {
			return createError(err, server)
		}
	}
	return renderFenceInit(app, st == term.Missing, server.Database)
}

// createError says why term.Create failed and what to do: on a refusal,
// which privilege is missing.
func createError(err error, server dbconn.ServerInfo) error {
	var ce *term.CreateError
	if !errors.As(err, &ce) || !ce.Denied() {
		return err
	}
	missing := "CREATE on database " + server.Database
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "for schema") {
		// The schema exists, made by another role, without a table.
		missing = "CREATE on schema leasectl"
	}
	return errkind.Mark(fmt.Errorf("role %q may not create the term record: it lacks %s (%v); run leasectl fence init as the database owner, "+
		"or put the SQL of leasectl fence init --print-sql in your migrations", server.User, missing, ce.Err), errkind.Unavailable)
}

func renderFenceInit(app *App, created bool, database string) error {
	w := app.IO.Out
	if app.JSON() {
		return app.writeJSON(w, fenceInitJSON{docHeader: header(true), Created: created, Schema: "leasectl", Database: database})
	}
	st := app.styles()
	if created {
		_, err := fmt.Fprintf(w, "%s created the term record: %s in database %s\n", st.OK.Render("✓"), termRecordObjects, termSafe(database))
		return err
	}
	_, err := fmt.Fprintf(w, "%s the term record already exists: %s in database %s; nothing to do\n", st.OK.Render("✓"), termRecordObjects, termSafe(database))
	return err
}
