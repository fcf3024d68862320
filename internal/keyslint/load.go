package keyslint

import "github.com/leasectl/leasectl/internal/keysfile"

// LoadHead reads the new version of a keys file for [Diff]. Its form must be
// valid, and of the lint rules only DUPLICATE_KEY may fail, since Diff
// reports that as a finding; any other problem is a [*keysfile.InvalidError].
func LoadHead(path string) (*keysfile.File, error) {
	return keysfile.Load(path, keysfile.Options{Skip: []string{RuleDuplicateKey}})
}

// LoadBase reads a base version of a keys file from disk for [Diff]. Like
// [LoadFromGit] it checks the form only: the base is history, and only its
// form must be readable.
func LoadBase(path string) (*keysfile.File, error) {
	return keysfile.Load(path, keysfile.Options{FormOnly: true})
}

// sharedKeys returns the DUPLICATE_KEY problems of f: keys shared by two
// roles, or by a role and a retired entry.
func sharedKeys(f *keysfile.File) []keysfile.Problem {
	var out []keysfile.Problem
	for _, p := range keysfile.Lint(f) {
		if p.Rule == RuleDuplicateKey {
			out = append(out, p)
		}
	}
	return out
}
