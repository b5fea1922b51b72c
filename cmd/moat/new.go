package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/guests"
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
	case !contains(guests.Languages, lang):
		hint := ""
		if s := nearestWord(lang, append(guests.Languages, "js", "as", "py", "c++", "golang", "python3")); s != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", langAlias(s))
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

// langAlias maps the short names nearestWord may pick to the --lang value.
func langAlias(s string) string {
	switch s {
	case "js":
		return "javascript"
	case "as":
		return "assemblyscript"
	case "py", "python3":
		return "python"
	case "c++":
		return "cpp"
	case "golang":
		return "go"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// nearestWord returns the word of words nearest to s by edit distance,
// when it is near enough to be what was meant (at most a third of its
// letters wrong, and at most 3), or "".
func nearestWord(s string, words []string) string {
	s = strings.ToLower(s)
	best, bestD := "", 1<<30
	for _, w := range words {
		if d := editDistance(s, w); d < bestD {
			best, bestD = w, d
		}
	}
	if bestD == 0 || bestD <= 3 && bestD*3 <= max(len(s), len(best)) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
