package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func init() { registerCommand(newSecretsCmd) }

// newSecretsCmd is `moat secrets`: the operator's secrets in the server's
// store, sealed under the secrets key.
func newSecretsCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets",
		Short: "Manage the operator's secrets: set, list, delete",
		Long: `Secrets are values a module's requests may use but no module ever reads: a
profile's http grant injects one into a header (Authorization: Bearer
${secret:github}), in the organization of whoever called the module; an AI
provider's key is one of the operator's own (no --org). Each is sealed with
AES-256-GCM under the secrets key before it is stored, bound to its
organization and name.

The key comes from $MOAT_SECRETS_KEY (the base64 of 32 random bytes: head -c
32 /dev/urandom | base64), or from secrets_key_file in the server config
given with --config. The store is the server's: --config (its data_dir or
database_url; $MOAT_DATABASE_URL wins) or --data.

A value is read from standard input, or prompted for without echo on a
terminal; never from an argument, where it would stay in the shell's
history and in the process list. Every change is audited (kind secret: who,
which organization, which name; never the value).`,
		Example: `  head -c 32 /dev/urandom | base64 > secrets.key && chmod 600 secrets.key
  export MOAT_SECRETS_KEY=$(cat secrets.key)
  moat secrets set --org acme github          # prompts for the value
  printf %s "$TOKEN" | moat secrets set --org acme github
  moat secrets set openai                     # the operator's own, for AI providers
  moat secrets list --org acme
  moat secrets delete --org acme github
  moat secrets rotate-key --config moat-server.yaml   # re-seal under secrets_key_file`,
	}
	configFile := new(string)
	cmd.PersistentFlags().StringVar(configFile, "config", "", "the server's configuration file (YAML): its data_dir or database_url, and secrets_key_file")
	cmd.AddCommand(newSecretsSetCmd(g, configFile), newSecretsListCmd(g, configFile), newSecretsDeleteCmd(g, configFile), newSecretsRotateKeyCmd(g, configFile))
	return cmd
}

// openVault opens the server's store and the vault over it, with an audit
// trail for the changes; close closes all three (the audit trail first,
// so its events are stored).
func openVault(cmd *cobra.Command, g *globalFlags, configFile string) (v *secrets.Vault, where string, close func(), err error) {
	cfg, err := g.serverConfig(configFile)
	if err != nil {
		return nil, "", nil, err
	}
	if cfg.SecretsKey == nil {
		return nil, "", nil, usagef("%v", secrets.ErrNoKey)
	}
	st, err := store.Open(cmd.Context(), cfg.StoreLocation())
	if err != nil {
		return nil, "", nil, err
	}
	log := audit.New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	close = func() {
		_ = log.Close(cmd.Context())
		st.Close()
	}
	return secrets.NewVault(st, cfg.SecretsKey, log), storeName(cfg), close, nil
}

// operator is who runs the command, for the audit trail.
func operator() secrets.Actor {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return secrets.Actor{Via: "cli", User: name}
}

func orgFlag(cmd *cobra.Command, org *string) {
	cmd.Flags().StringVar(org, "org", "", "the organization whose secret it is (none: the operator's own, for AI providers)")
}

// checkOrg validates --org: empty (the operator's) or an organization name.
func checkOrg(org string) error {
	if org == "" {
		return nil
	}
	if err := (policy.Principal{Org: org, User: "operator"}).Validate(); err != nil {
		return usagef("--org: %v", err)
	}
	return nil
}

func whose(org string) string {
	if org == "" {
		return "the operator's own"
	}
	return "organization " + org
}

func newSecretsSetCmd(g *globalFlags, configFile *string) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "set [--org ORG] NAME",
		Short: "Set a secret; the value comes from stdin or a prompt, never an argument",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := abi.CheckSecretName(name); err != nil {
				return usagef("%v", err)
			}
			if err := checkOrg(org); err != nil {
				return err
			}
			v, where, closeAll, err := openVault(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer closeAll()
			value, err := readSecret(cmd, name, org)
			if err != nil {
				return err
			}
			created, err := v.Set(cmd.Context(), operator(), org, name, value)
			clear(value)
			var ae *abi.Error
			if errors.As(err, &ae) || errors.Is(err, secrets.ErrNoKey) || errors.Is(err, store.ErrSecretQuota) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			what := "replaced"
			if created {
				what = "stored"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s secret %s of %s in %s\n", what, name, whose(org), where)
			return nil
		},
	}
	orgFlag(cmd, &org)
	return cmd
}

// readSecret reads the value: without echo from a terminal, else all of
// standard input less one trailing line break (what echo and most files
// end with), bounded.
func readSecret(cmd *cobra.Command, name, org string) ([]byte, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(cmd.ErrOrStderr(), "value of secret %s of %s (not echoed): ", name, whose(org))
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return nil, fmt.Errorf("reading the value: %w", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(in), abi.MaxSecretBytes+3))
	if err != nil {
		return nil, fmt.Errorf("reading the value from standard input: %w", err)
	}
	switch {
	case len(b) >= 2 && string(b[len(b)-2:]) == "\r\n":
		b = b[:len(b)-2]
	case len(b) >= 1 && b[len(b)-1] == '\n':
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil, usagef("no value on standard input; pipe it in (printf %%s \"$TOKEN\" | moat secrets set ...) or run on a terminal to be prompted")
	}
	return b, nil
}

func newSecretsListCmd(g *globalFlags, configFile *string) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "list [--org ORG]",
		Short: "List secrets: names and dates, never values",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOrg(org); err != nil {
				return err
			}
			v, _, closeAll, err := openVault(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer closeAll()
			list, err := v.List(cmd.Context(), org)
			if errors.Is(err, secrets.ErrNoKey) {
				return usagef("%v", err)
			}
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tUPDATED\tBY\tCREATED\tKEY")
			for _, s := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", termSafe(s.Name), s.UpdatedAt.Local().Format(time.DateTime), termSafe(s.UpdatedBy),
					s.CreatedAt.Local().Format(time.DateTime), termSafe(s.KeyID))
			}
			return w.Flush()
		},
	}
	orgFlag(cmd, &org)
	return cmd
}

func newSecretsDeleteCmd(g *globalFlags, configFile *string) *cobra.Command {
	var org string
	cmd := &cobra.Command{
		Use:   "delete [--org ORG] NAME",
		Short: "Delete a secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := abi.CheckSecretName(name); err != nil {
				return usagef("%v", err)
			}
			if err := checkOrg(org); err != nil {
				return err
			}
			v, where, closeAll, err := openVault(cmd, g, *configFile)
			if err != nil {
				return err
			}
			defer closeAll()
			err = v.Delete(cmd.Context(), operator(), org, name)
			switch {
			case errors.Is(err, store.ErrSecretNotFound):
				return usagef("%s has no secret %s in %s; `moat secrets list%s` shows its secrets", whose(org), name, where, orgArg(org))
			case errors.Is(err, secrets.ErrNoKey):
				return usagef("%v", err)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted secret %s of %s\n", name, whose(org))
			return nil
		},
	}
	orgFlag(cmd, &org)
	return cmd
}

func orgArg(org string) string {
	if org == "" {
		return ""
	}
	return " --org " + org
}

func newSecretsRotateKeyCmd(g *globalFlags, configFile *string) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-key",
		Short: "Re-seal every stored secret under the server's key, opening each with its old keys",
		Long: `Re-seals every secret in the store (every organization's and the operator's)
under the secrets key the configuration gives (secrets_key_file or
$MOAT_SECRETS_KEY), opening each with the key that sealed it among
secrets_old_key_files. No plaintext is asked for. It is safe while replicas
serve and resumable: each value is replaced only if no one set it meanwhile,
values already under the key are skipped, and running it again after an
interruption finishes the work.

Rotating the key while replicas serve, in order:
  1. make the new key readable everywhere: every replica keeps its key
     and lists the new one in secrets_old_key_files (roll them);
  2. switch: every replica's secrets_key_file is the new key, the old one
     in secrets_old_key_files (roll them);
  3. moat secrets rotate-key --config (this configuration: new key, old
     key among the old ones);
  4. drop the old key from secrets_old_key_files (roll them) and destroy it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.serverConfig(*configFile)
			if err != nil {
				return err
			}
			if cfg.SecretsKey == nil {
				return usagef("%v", secrets.ErrNoKey)
			}
			st, err := store.Open(cmd.Context(), cfg.StoreLocation())
			if err != nil {
				return err
			}
			defer st.Close()
			log := audit.New(st, slog.New(slog.NewTextHandler(io.Discard, nil)))
			defer log.Close(cmd.Context())
			start := time.Now()
			r, err := secrets.Rotate(cmd.Context(), st, cfg.SecretsOldKeys, cfg.SecretsKey, operator(), log)
			fmt.Fprintf(cmd.ErrOrStderr(), "re-sealed %d secrets under key %s in %s (%s)", r.Resealed, cfg.SecretsKey.ID(), time.Since(start).Round(time.Millisecond), storeName(cfg))
			if r.Changed > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "; %d were set or deleted meanwhile and left as their writer sealed them (run it again to re-check)", r.Changed)
			}
			fmt.Fprintln(cmd.ErrOrStderr())
			if err != nil {
				return usagef("%v", err)
			}
			return nil
		},
	}
}
