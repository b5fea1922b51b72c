package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// suggestCommands makes every command that only groups others (moat
// itself, moat keys, moat secrets...) refuse an unknown subcommand as a
// usage error naming the closest one: cobra's own "unknown command" put
// its "Did you mean this?" on lines oneLine drops, and a group command
// given a wrong subcommand (moat keys crate) printed its help and exited 0.
// With no arguments a group command still prints its help.
func suggestCommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		suggestCommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
}

// unknownCommand is the usage error for name, an unknown subcommand of
// parent.
func unknownCommand(parent *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, parent.CommandPath())
	if parent.SuggestionsMinimumDistance <= 0 {
		parent.SuggestionsMinimumDistance = 2 // cobra's default, which only its own error path sets
	}
	if s := parent.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	var subs []string
	for _, sub := range parent.Commands() {
		if sub.IsAvailableCommand() {
			subs = append(subs, sub.Name())
		}
	}
	return usagef("%s (commands: %s; see `%s --help`)", msg, strings.Join(subs, ", "), parent.CommandPath())
}
