package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
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
		Short: "Manage the API keys of moat serve: create, list, revoke, rotate",
		Long: `API keys authenticate requests to moat serve. Each key is bound to a user of
an organization and holds roles; every request made with it runs as that
principal, in that organization. Keys live hashed in the server's store: give
the server's configuration with --config (its data_dir, or its database_url
when replicas share PostgreSQL; $MOAT_DATABASE_URL wins over both), or its
data directory with --data. The key itself is printed once, by create and
rotate. A running server offers the same over its API (/v1/keys) and in its
console's Keys page, for a key holding the permission key.manage.

A key may be narrowed by scopes (--scope, repeatable): invoke, invoke:MODULE,
run, audit:read, read, keys; without scopes it reaches all its roles allow.
--expires makes it stop after a duration. A revoked key stops working within
a second on every replica. With --server, the same commands go over that
server's API as the holder of $MOAT_API_KEY (or --key-file): the server
checks the permission key.manage and that no key is wider than the caller's. Each operation is in the audit trail (kind api_key).`,
		Example: `  moat keys create --org acme --user ann --role admin --name laptop
  moat keys create --config moat-server.yaml --org acme --user ann
  moat keys list --org acme
  moat keys create --org acme --user ci --role dev --scope invoke:hello --expires 720h
  moat keys revoke key_3f9a1c2b7d4e
  moat keys rotate key_3f9a1c2b7d4e --grace 10m
  MOAT_API_KEY=$ADMIN moat keys --server https://moat.example.com create --user ci --scope run`,
	}
	configFile := new(string)
	cmd.PersistentFlags().StringVar(configFile, "config", "", "the server's configuration file (YAML): its data_dir or database_url")
	cmd.PersistentFlags().StringVar(&keysServer, "server", "", "manage keys on this running server over its API (/v1/keys), as the holder of $"+envAPIKey+" or --key-file")
	cmd.PersistentFlags().StringVar(&keysKeyFile, "key-file", "", "with --server: a file holding the API key (default $"+envAPIKey+")")
	cmd.AddCommand(newKeysCreateCmd(g, configFile), newKeysListCmd(g, configFile), newKeysRevokeCmd(g, configFile), newKeysRotateCmd(g, configFile))
	return cmd
}

// keysServer and keysKeyFile are moat keys' --server and --key-file.
var keysServer, keysKeyFile string

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

// auditKeyOp records a key operation of the command line in the store's
// audit trail, as the API records its own.
func auditKeyOp(cmd *cobra.Command, st *store.Store, rule string, k store.APIKey) {
	log := audit.New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer log.Close(cmd.Context())
	log.Record(cmd.Context(), audit.Event{Kind: audit.KindAPIKey, Decision: audit.Allow, User: operator().User, Org: k.Org, Rule: rule,
		Attrs: map[string]string{"key": k.ID, "user": k.User, "roles": strings.Join(k.Roles, ","), "scopes": strings.Join(k.Scopes, ","), "by": operator().String()}})
}

func newKeysCreateCmd(g *globalFlags, configFile *string) *cobra.Command {
	var spec server.NewAPIKey
	var expires time.Duration
	cmd := &cobra.Command{
		Use:   "create --org ORG --user USER [--role ROLE]... [--name LABEL]",
		Short: "Create an API key and print it (once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if expires < 0 {
				return usagef("--expires %s: give a positive duration, such as 720h", expires)
			}
			if rk, err := remoteKeys(keysServer, keysKeyFile); err != nil || rk != nil {
				if err != nil {
					return err
				}
				var roles, scopes []string
				if cmd.Flags().Changed("role") {
					roles = spec.Roles
				}
				if cmd.Flags().Changed("scope") {
					scopes = spec.Scopes
				}
				return rk.create(cmd, spec.Org, spec.User, roles, scopes, spec.Name, expires)
			}
			if spec.Org == "" || spec.User == "" {
				return usagef("give --org and --user: the key acts as that user of that organization")
			}
			st, where, err := openServerStore(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer st.Close()
			if expires > 0 {
				spec.ExpiresAt = time.Now().Add(expires)
			}
			secret, key, err := server.CreateAPIKey(cmd.Context(), st, spec)
			if err != nil {
				return usagef("%v", err)
			}
			auditKeyOp(cmd, st, "create", key)
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
	fl.StringArrayVar(&spec.Scopes, "scope", nil, "narrow the key (repeatable): invoke, invoke:MODULE, run, audit:read, read, keys")
	fl.DurationVar(&expires, "expires", 0, "the key stops working after this long (0: never)")
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
			if rk, err := remoteKeys(keysServer, keysKeyFile); err != nil || rk != nil {
				if err != nil {
					return err
				}
				return rk.list(cmd)
			}
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
			fmt.Fprintln(w, "ID\tORG\tUSER\tROLES\tSCOPES\tNAME\tCREATED\tSTATUS\tLAST USED")
			now := time.Now()
			for _, k := range keys {
				status := "active"
				switch {
				case !k.RevokedAt.IsZero():
					status = "revoked " + k.RevokedAt.Local().Format(time.DateTime)
				case k.Expired(now):
					status = "expired " + k.ExpiresAt.Local().Format(time.DateTime)
				case !k.ExpiresAt.IsZero():
					status = "expires " + k.ExpiresAt.Local().Format(time.DateTime)
				}
				scopes, used := "all", "never"
				if len(k.Scopes) > 0 {
					scopes = strings.Join(k.Scopes, ",")
				}
				if !k.LastUsedAt.IsZero() {
					used = k.LastUsedAt.Local().Format(time.DateTime) + " " + k.LastUsedAddr
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(k.ID), termSafe(k.Org), termSafe(k.User), termSafe(strings.Join(k.Roles, ",")), termSafe(scopes), termSafe(k.Name),
					k.CreatedAt.Local().Format(time.DateTime), status, termSafe(used))
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
			if rk, err := remoteKeys(keysServer, keysKeyFile); err != nil || rk != nil {
				if err != nil {
					return err
				}
				return rk.revoke(cmd, args[0])
			}
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
			if k, err := st.APIKeyByID(cmd.Context(), args[0]); err == nil {
				auditKeyOp(cmd, st, "revoke", *k)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "revoked %s; every server refuses it within a second\n", args[0])
			return nil
		},
	}
}

func newKeysRotateCmd(g *globalFlags, configFile *string) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "rotate ID [--grace DURATION]",
		Short: "Give an API key a new secret and print it (once); the old one works for --grace",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rk, err := remoteKeys(keysServer, keysKeyFile); err != nil || rk != nil {
				if err != nil {
					return err
				}
				return rk.rotate(cmd, args[0], grace)
			}
			st, where, err := openServerStore(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer st.Close()
			k, err := st.APIKeyByID(cmd.Context(), args[0])
			if errors.Is(err, store.ErrAPIKeyNotFound) {
				return usagef("no API key %s in %s; `moat keys list` shows the ids", args[0], where)
			}
			if err != nil {
				return err
			}
			if !k.RevokedAt.IsZero() {
				return usagef("API key %s is revoked; create a new one", k.ID)
			}
			secret, err := server.RotateAPIKey(cmd.Context(), st, k, grace)
			if err != nil {
				return usagef("%v", err)
			}
			auditKeyOp(cmd, st, "rotate", *k)
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			note := "the old one stops now"
			if grace > 0 {
				note = "the old one works for " + grace.String() + " more"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "rotated %s; the key above is shown only now: keep it; %s\n", k.ID, note)
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "how long the old secret keeps working (at most 24h)")
	return cmd
}
