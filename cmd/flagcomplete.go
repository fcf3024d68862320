package cmd

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag completion: for a flag with no completion of its own, cobra lets
// the shell complete file names, so `history --since <TAB>` offered the
// files of the directory. Only the flags that take a path do
// (fileFlags); every other flag that takes a value completes its values
// where it has a known few (-o, --role, --shell), and nothing otherwise.

// fileFlags are the flags that take a path, and complete file names (those
// marked with an extension, the files that have it; --dir, directories).
var fileFlags = map[string]bool{"keys": true, "procfile": true, "base-file": true, "dir": true}

// completeNoFilesForFlags registers, for every flag of every command under
// root that takes a value but no path and has no completion yet, a
// completion that offers nothing, not even file names.
func completeNoFilesForFlags(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if fileFlags[f.Name] || f.Value.Type() == "bool" {
					return
				}
				if _, ok := c.GetFlagCompletionFunc(f.Name); ok {
					return
				}
				_ = c.RegisterFlagCompletionFunc(f.Name, cobra.NoFileCompletions)
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
