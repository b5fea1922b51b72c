package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newAPIKeysCmd) }

// newAPIKeysCmd is `moat keys`: the API keys of `moat serve`. (Signing keys
// are `moat keygen`, `moat sign` and `moat verify`.)
func newAPIKeysCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage the API keys of moat serve: create, list, revoke",
		Long: `API keys authenticate requests to moat serve. Each key is bound to a user of
an organization and holds roles; every request made with it runs as that
principal, in that organization. Keys live hashed in the server's store: give
the server's configuration with --config (its data_dir, or its database_url
when replicas share PostgreSQL; $MOAT_DATABASE_URL wins over both), or its
data directory with --data. The key itself is printed once, by create.

A revoked key stops working within 5 seconds on a running server.`,
		Example: `  moat keys create --org acme --user ann --role admin --name laptop
  moat keys create --config moat-server.yaml --org acme --user ann
  moat keys list --org acme
  moat keys revoke key_3f9a1c2b7d4e`,
	}
	configFile := new(string)
	cmd.PersistentFlags().StringVar(configFile, "config", "", "the server's configuration file (YAML): its data_dir or database_url")
	cmd.AddCommand(newKeysCreateCmd(g, configFile), newKeysListCmd(g, configFile), newKeysRevokeCmd(g, configFile))
	return cmd
}

// openServerStore opens the store of the server configFile configures
// (see serverConfig), and names it for messages.
func openServerStore(cmd *cobra.Command, g *globalFlags, configFile string) (*store.Store, string, error) {
	cfg, err := g.serverConfig(configFile)
	if err != nil {
		return nil, "", err
	}
	st, err := store.Open(cmd.Context(), cfg.StoreLocation())
	if err != nil {
		return nil, "", err
	}
	return st, storeName(cfg), nil
}

func newKeysCreateCmd(g *globalFlags, configFile *string) *cobra.Command {
	var spec server.NewAPIKey
	cmd := &cobra.Command{
		Use:   "create --org ORG --user USER [--role ROLE]... [--name LABEL]",
		Short: "Create an API key and print it (once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if spec.Org == "" || spec.User == "" {
				return usagef("give --org and --user: the key acts as that user of that organization")
			}
			st, where, err := openServerStore(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer st.Close()
			secret, key, err := server.CreateAPIKey(cmd.Context(), st, spec)
			if err != nil {
				return usagef("%v", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "created %s for %s@%s%s in %s; the key above is shown only now: keep it\n",
				key.ID, key.User, key.Org, rolesNote(key.Roles), where)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&spec.Org, "org", "", "organization the key acts in")
	fl.StringVar(&spec.User, "user", "", "user the key acts as")
	fl.StringArrayVar(&spec.Roles, "role", nil, "a role of the user (repeatable)")
	fl.StringVar(&spec.Name, "name", "", "a label: what or who the key is for")
	return cmd
}

func rolesNote(roles []string) string {
	if len(roles) == 0 {
		return ""
	}
	return " [" + strings.Join(roles, ",") + "]"
}

func newKeysListCmd(g *globalFlags, configFile *string) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "list [--org ORG]",
		Short: "List API keys (never the keys themselves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, _, err := openServerStore(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := st.APIKeys(cmd.Context(), org)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tORG\tUSER\tROLES\tNAME\tCREATED\tSTATUS")
			for _, k := range keys {
				status := "active"
				if !k.RevokedAt.IsZero() {
					status = "revoked " + k.RevokedAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(k.ID), termSafe(k.Org), termSafe(k.User), termSafe(strings.Join(k.Roles, ",")), termSafe(k.Name),
					k.CreatedAt.Local().Format(time.DateTime), status)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&org, "org", "", "only this organization's keys")
	return cmd
}

func newKeysRevokeCmd(g *globalFlags, configFile *string) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key by its id (see moat keys list)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, where, err := openServerStore(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.APIKeyRevoke(cmd.Context(), args[0], time.Now().UTC()); err != nil {
				if errors.Is(err, store.ErrAPIKeyNotFound) {
					return usagef("no API key %s in %s; `moat keys list` shows the ids", args[0], where)
				}
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "revoked %s\n", args[0])
			return nil
		},
	}
}
