package cmd

import (
	"fmt"

	"github.com/leasectl/leasectl/internal/buildinfo"
	"github.com/spf13/cobra"
)

func newVersionCmd(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Show leasectl's version, commit, build date and Go version",
		Long: `Show which build of leasectl this is: the version, the commit, the build
date and the Go version. Release builds carry the values stamped at release;
a go install …@vX.Y.Z build carries its module version; a build from a clone
carries the commit and its time when the Go toolchain recorded them.

"leasectl --version" prints the same on one line; -o json prints
{"schema_version", "ok", "version", "commit", "date", "modified",
"go_version", "platform"} for either.`,
		Example: `  leasectl version
  leasectl version -o json
  leasectl --version`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error { return renderVersion(app, false) },
	}
}

// versionJSON is the documented schema of `leasectl version -o json`
// (docs/json.md).
type versionJSON struct {
	docHeader
	Version   string  `json:"version"`
	Commit    *string `json:"commit"` // null when unknown
	Date      *string `json:"date"`   // null when unknown
	Modified  bool    `json:"modified"`
	GoVersion string  `json:"go_version"`
	Platform  string  `json:"platform"`
}

// renderVersion prints the build information: one line (--version) or a
// few labelled lines (leasectl version), or JSON for -o json.
func renderVersion(app *App, oneLine bool) error {
	info := buildinfo.Get()
	w := app.IO.Out
	switch {
	case app.JSON():
		return app.writeJSON(w, versionJSON{docHeader: header(true), Version: info.Version, Commit: strOrNil(info.Commit), Date: strOrNil(info.Date),
			Modified: info.Modified, GoVersion: info.GoVersion, Platform: info.Platform})
	case oneLine:
		_, err := fmt.Fprintf(w, "leasectl %s\n", info)
		return err
	}
	unknown := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	commit := unknown(info.Commit)
	if info.Modified {
		commit += " (with uncommitted changes)"
	}
	_, err := fmt.Fprintf(w, "leasectl %s\ncommit:  %s\ndate:    %s\ngo:      %s %s\n", info.Version, commit, unknown(info.Date), info.GoVersion, info.Platform)
	return err
}
