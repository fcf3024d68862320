package cmd

//go:generate go run ../tools/gencompletions ../completions
//go:generate go run ../tools/gendocs ../docs/reference ../docs/man

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// Shells are the shells `leasectl completion` writes scripts for.
var Shells = []string{"bash", "zsh", "fish", "powershell"}

// CompletionFile is the name of the committed script for shell under
// completions/.
func CompletionFile(shell string) string {
	switch shell {
	case "bash":
		return "leasectl.bash"
	case "zsh":
		return "_leasectl"
	case "fish":
		return "leasectl.fish"
	default:
		return "leasectl.ps1"
	}
}

// GenerateCompletion writes the completion script for shell, exactly as
// `leasectl completion SHELL` prints it.
func GenerateCompletion(shell string, w io.Writer) error {
	app := &App{IO: &IOStreams{In: &bytes.Buffer{}, Out: w, ErrOut: io.Discard}, Getenv: func(string) string { return "" }}
	root := NewRootCmd(app)
	switch shell {
	case "bash":
		return root.GenBashCompletionV2(w, true)
	case "zsh":
		return root.GenZshCompletion(w)
	case "fish":
		return root.GenFishCompletion(w, true)
	case "powershell":
		return root.GenPowerShellCompletionWithDesc(w)
	}
	return fmt.Errorf("unknown shell %q", shell)
}

// completeRoles completes ROLE arguments with the role names of the keys
// file, each described by its key. Names already on the command line are
// not offered again.
func completeRoles(app *App) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		f, err := app.LoadKeys()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		used := map[string]bool{}
		for _, a := range args {
			used[a] = true
		}
		var out []cobra.Completion
		for _, e := range f.Roles {
			if !used[e.Name] && strings.HasPrefix(e.Name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(e.Name, "key "+strconv.FormatInt(e.Key, 10)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeOneRole is completeRoles for commands that take a single ROLE.
func completeOneRole(app *App) cobra.CompletionFunc {
	all := completeRoles(app)
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return all(c, args, toComplete)
	}
}

// bashCompletionHelp replaces cobra's help text of `leasectl completion
// bash`: the script calls functions of the bash-completion package, and
// without it completing prints an error instead of candidates.
const bashCompletionHelp = `Generate the autocompletion script for the bash shell.

The script needs the bash-completion package (Debian and Ubuntu:
apt-get install bash-completion), loaded by the shell (interactive shells do
once it is installed). Without it, completing (leasectl w<TAB>) prints
"_get_comp_words_by_ref: command not found" and completes nothing.

To load completions in your current shell session:

	source <(leasectl completion bash)

To load completions for every new session, execute once:

Linux:

	leasectl completion bash > /etc/bash_completion.d/leasectl

macOS:

	leasectl completion bash > $(brew --prefix)/etc/bash_completion.d/leasectl

You will need to start a new shell for this setup to take effect.

make install, from a clone, puts it in /usr/local/share/bash-completion/completions
(under its PREFIX), where bash-completion loads it when first needed.
`

// describeCompletion sets the help text of the completion subcommands that
// need more than cobra says; root's default completion command must exist.
func describeCompletion(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		for _, sh := range c.Commands() {
			if sh.Name() == "bash" {
				sh.Long = bashCompletionHelp
			}
		}
	}
}
