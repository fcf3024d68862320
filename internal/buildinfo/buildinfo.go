// Package buildinfo says which build of leasectl is running. A release build
// stamps the version, commit and date with the linker:
//
//	go build -ldflags "-X github.com/leasectl/leasectl/internal/buildinfo.version=1.2.0
//	  -X github.com/leasectl/leasectl/internal/buildinfo.commit=<hash>
//	  -X github.com/leasectl/leasectl/internal/buildinfo.date=<RFC 3339 time>"
//
// (.goreleaser.yaml does this). Without them, what the Go toolchain recorded
// is used: the module version that `go install …@v1.2.0` records, and the
// VCS revision and commit time of a build from a clone.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set with -ldflags -X by release builds; empty otherwise.
var version, commit, date string

// Info describes one build of leasectl.
type Info struct {
	// Version is a semantic version with a leading "v" (v1.2.0), a
	// pseudo-version, or "devel" for a build from source without one.
	Version string `json:"version"`
	// Commit is the full VCS revision, or empty when unknown.
	Commit string `json:"commit"`
	// Date is when the build was made (release builds) or when its commit
	// was made (builds from a clone), RFC 3339; empty when unknown.
	Date string `json:"date"`
	// Modified is set when a build from a clone had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the Go release that built the binary.
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info {
	info, _ := debug.ReadBuildInfo()
	return resolve(version, commit, date, info)
}

// resolve combines the linker-stamped values with what the toolchain
// recorded in info (which may be nil); stamped values win.
func resolve(ldVersion, ldCommit, ldDate string, info *debug.BuildInfo) Info {
	// goreleaser stamps "none" for a commit it could not read (a snapshot
	// of a clone without a remote): unknown, like no stamp at all.
	if ldCommit == "none" {
		ldCommit = ""
	}
	out := Info{Version: ldVersion, Commit: ldCommit, Date: ldDate, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info != nil {
		if out.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			out.Version = info.Main.Version
		}
		fromVCS := out.Commit == ""
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && out.Commit == "":
				out.Commit = s.Value
			case s.Key == "vcs.time" && out.Date == "":
				out.Date = s.Value
			case s.Key == "vcs.modified" && fromVCS:
				out.Modified = s.Value == "true"
			}
		}
		if info.GoVersion != "" {
			out.GoVersion = info.GoVersion
		}
	}
	switch {
	case out.Version == "":
		out.Version = "devel"
	case out.Version[0] >= '0' && out.Version[0] <= '9':
		out.Version = "v" + out.Version // goreleaser's {{.Version}} drops the tag's "v"
	}
	return out
}

// String renders the build on one line, as `leasectl --version` prints it:
// "v1.2.0 (3f1c2a9b7d10, 2026-01-05T10:00:00Z) go1.26.8 linux/amd64".
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	var about []string
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if i.Modified {
			c += "+dirty"
		}
		about = append(about, c)
	}
	if i.Date != "" {
		about = append(about, i.Date)
	}
	if len(about) > 0 {
		b.WriteString(" (" + strings.Join(about, ", ") + ")")
	}
	b.WriteString(" " + i.GoVersion + " " + i.Platform)
	return b.String()
}
