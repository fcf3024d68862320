package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/leasectl/leasectl", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "eda38118450e4ec26b54555405c13c27c968fea2"},
			{Key: "vcs.time", Value: "2026-12-01T02:01:38Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}}
	for _, tc := range []struct {
		name                string
		ldV, ldC, ldD       string
		info                *debug.BuildInfo
		version, commit, at string
		modified            bool
	}{
		{"release build: the linker's values win", "1.5.0", "abc", "2027-01-01T00:00:00Z", vcs, "v1.5.0", "abc", "2027-01-01T00:00:00Z", false},
		{"a tag's v is kept", "v1.5.0", "", "", nil, "v1.5.0", "", "", false},
		{"goreleaser's none is no commit", "0.0.1-snapshot", "none", "2027-01-01T00:00:00Z", vcs, "v0.0.1-snapshot", "eda38118450e4ec26b54555405c13c27c968fea2", "2027-01-01T00:00:00Z", true},
		{"go install …@v1.4.0", "", "", "", installed, "v1.4.0", "", "", false},
		{"a build in a clone", "", "", "", vcs, "devel", "eda38118450e4ec26b54555405c13c27c968fea2", "2026-12-01T02:01:38Z", true},
		{"nothing recorded", "", "", "", nil, "devel", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ldV, tc.ldC, tc.ldD, tc.info)
			if got.Version != tc.version || got.Commit != tc.commit || got.Date != tc.at || got.Modified != tc.modified || got.GoVersion == "" || got.Platform == "" {
				t.Errorf("got %+v; want version %q, commit %q, date %q, modified %v", got, tc.version, tc.commit, tc.at, tc.modified)
			}
		})
	}
	if s := resolve("", "", "", vcs).String(); s != "devel (eda38118450e+dirty, 2026-12-01T02:01:38Z) go1.26.8 "+resolve("", "", "", nil).Platform {
		t.Errorf("String: %q", s)
	}
}
