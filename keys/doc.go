// Package keys reads keys.yaml, the map from role names to the 64-bit
// advisory-lock keys that replicas contend for, so that a Go service takes
// its role's key from the file leasectl uses:
//
//	f, err := keys.Load("keys.yaml")
//	if err != nil {
//		return err // names file:line of every problem
//	}
//	role, ok := f.Role("poller")
//	if !ok {
//		return errors.New("keys.yaml has no role poller")
//	}
//	err = lease.Run(ctx, lease.Config{Role: role.Name, Key: role.Key, DSN: dsn}, work)
//
// [Load] (a path) and [Parse] (bytes) accept a file only when it passes
// every rule of `leasectl keys lint`, the same check, so a service never
// starts on a file the CLI refuses. The format and the rules:
// docs/keys-yaml.md and docs/guide/keys.md.
//
// # What you may rely on
//
// The identifiers exported here are leasectl's API for keys.yaml, kept
// within a major version: none is removed or changes meaning, though fields
// and methods may be added. A file that loads yields the same key for each
// role in every version, since the only spellings accepted are those every
// YAML reader reads as the same int64. Rule names ([Problem.Rule]) never
// change; new rules may be added, so a file a later version refuses is one
// whose problem `keys lint` names. Messages are for people and may change;
// match on rules, not on text. Comparing two versions of a file (`keys
// diff`) is the CLI's job and not part of this API.
//
// # Hostile input
//
// Files are capped at [MaxFileSize], YAML anchors and aliases are refused
// rather than expanded (an alias bomb is an error, not a memory spike), and
// the YAML parser's own nesting limit bounds deep documents.
package keys
