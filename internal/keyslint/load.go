package keyslint

import (
	"github.com/leasectl/leasectl/internal/keysinternal"
	"github.com/leasectl/leasectl/keys"
)

// Package keys's parser, with a choice of the rules about how roles relate
// (parse), and those rules alone (lint): see keysinternal.
var (
	parse = keysinternal.Parse.(func(path string, data []byte, relations func(rule string) bool) (*keys.File, error))
	lint  = keysinternal.Lint.(func(*keys.File) []keys.Problem)
)

// LoadHead reads the new version of a keys file for [Diff]. Its form must be
// valid, and of the lint rules only DUPLICATE_KEY may fail, since Diff
// reports that as a finding; any other problem is a [*keys.InvalidError].
func LoadHead(path string) (*keys.File, error) {
	data, err := keysinternal.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, data, func(rule string) bool { return rule != RuleDuplicateKey })
}

// LoadBase reads a base version of a keys file from disk for [Diff]. Like
// [LoadFromGit] it checks the form only: the base is history, and only its
// form must be readable.
func LoadBase(path string) (*keys.File, error) {
	data, err := keysinternal.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parse(path, data, nil)
}

// sharedKeys returns the DUPLICATE_KEY problems of f: keys shared by two
// roles, or by a role and a retired entry.
func sharedKeys(f *keys.File) []keys.Problem {
	var out []keys.Problem
	for _, p := range lint(f) {
		if p.Rule == RuleDuplicateKey {
			out = append(out, p)
		}
	}
	return out
}

// retiredRole returns the retired entry of f called name.
func retiredRole(f *keys.File, name string) (keys.Entry, bool) {
	for _, e := range f.Retired {
		if e.Name == name {
			return e, true
		}
	}
	return keys.Entry{}, false
}
