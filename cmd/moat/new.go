package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/languages"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newNewCmd) }

func newNewCmd(g *globalFlags) *cobra.Command {
	var lang, dir string
	cmd := &cobra.Command{
		Use:   "new NAME --lang LANG",
		Short: "Make a new plugin: manifest, code, a test and the guest SDK, ready for moat build and moat run",
		Long: `Make a new plugin directory NAME (or --dir) in one of: ` + strings.Join(guests.Languages, ", ") + `.

It holds moat.yaml, code with a greet action that reads its configuration,
logs and counts its calls in the key-value store, a README, a test where the
language has one (go test, cargo test), and the guest SDK this moat carries:
Go as a local module in .moat-sdk/go that go.mod replaces
github.com/moat-sandbox/moat with, Rust as a path crate in .moat-sdk/rust,
moat.h (C, C++) and moat.ts (AssemblyScript) beside the code, moat.js and
moat.py in .moat-sdk/ for editors (moat provides them at run time; a
native Python plugin, one flat directory, gets none). Nothing
is downloaded: the plugin builds offline, anywhere.`,
		Example: `  moat new hello --lang go && moat run hello greet --input World
  moat new hello-rs --lang rust && moat build hello-rs`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return newPlugin(args[0], lang, dir)
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "", "the plugin's language: "+strings.Join(guests.Languages, ", "))
	cmd.Flags().StringVar(&dir, "dir", "", "the directory to make (default: NAME in the working directory)")
	return cmd
}

func newPlugin(name, lang, dir string) error {
	if err := guests.CheckName(name); err != nil {
		return usagef("%v", err)
	}
	switch {
	case lang == "":
		return usagef("give the plugin's language: --lang %s", strings.Join(guests.Languages, "|"))
	case !slices.Contains(guests.Languages, lang):
		hint := ""
		if s := templateFor(lang); s != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", s)
		}
		return usagef("--lang %q: moat new makes plugins in %s%s", lang, strings.Join(guests.Languages, ", "), hint)
	}
	if dir == "" {
		dir = name
	}
	files, err := guests.Scaffold(dir, name, lang)
	if errors.Is(err, guests.ErrExists) {
		return usagef("%v (moat new never writes over files)", err)
	}
	if err != nil {
		return fmt.Errorf("new %s: %w", name, err)
	}
	shown := 0
	for _, f := range files {
		if strings.HasPrefix(f, ".moat-sdk/") {
			continue
		}
		fmt.Fprintf(os.Stderr, "    %s\n", filepath.Join(dir, f))
		shown++
	}
	fmt.Fprintf(os.Stderr, "==> made %s (%s): %d files, the SDK included\n", dir, lang, len(files))
	if lang == "go" || lang == "rust" || lang == "c" || lang == "cpp" || lang == "assemblyscript" {
		fmt.Fprintf(os.Stderr, "next: moat build %s && moat run %s greet --input World\n", dir, dir)
	} else {
		fmt.Fprintf(os.Stderr, "next: moat run %s greet --input World\n", dir)
	}
	return nil
}

// templateFor is the template (guests.Languages) lang means or likely
// means: an alias of a language (js, golang, python3), or the language
// the registry suggests for a typo (pyton) — the registry's own names and
// suggestion, so moat new, moat exec and /v1/runs agree on them.
func templateFor(lang string) string {
	name := ""
	l, err := languages.Lookup(lang)
	var unknown *languages.UnknownLanguageError
	switch {
	case err == nil:
		name = l.Info().Name
	case errors.As(err, &unknown):
		name = unknown.Suggestion
	}
	if name == "python3-native" {
		name = "python-native" // the template's name of the native Python plugin
	}
	if !slices.Contains(guests.Languages, name) {
		return ""
	}
	return name
}
