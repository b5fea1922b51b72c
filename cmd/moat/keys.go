package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
	"github.com/spf13/cobra"
)

func newKeygenCmd() *cobra.Command {
	var out, passwordFile string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen --out NAME",
		Short: "Create an ed25519 signing key pair (minisign format)",
		Long: `Keygen writes NAME.key (the secret key, mode 0600) and NAME.pub (the public
key). Both are minisign files: the stock minisign tool reads them, and the
signatures moat makes verify with 'minisign -Vm module.wasm -p NAME.pub'.

Give an operator the line starting with RW from NAME.pub; it goes under
trusted_keys in their profile.`,
		Example: "  moat keygen --out release\n  moat keygen --out release --password-file pw.txt",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("--out NAME is required: the key pair is written to NAME.key and NAME.pub")
			}
			password, err := readPassword(passwordFile)
			if err != nil {
				return err
			}
			pub, priv, err := policy.GenerateKey(password)
			if err != nil {
				return err
			}
			for _, f := range []string{out + ".key", out + ".pub"} {
				if _, err := os.Stat(f); err == nil && !force {
					return usagef("%s exists; pick another --out or pass --force to overwrite it", f)
				}
			}
			if err := os.WriteFile(out+".key", priv, 0o600); err != nil {
				return err
			}
			if err := os.WriteFile(out+".pub", pub, 0o644); err != nil {
				return err
			}
			key, _ := policy.ParsePublicKey(string(pub))
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.key (secret) and %s.pub\nkey id %s; for a profile's trusted_keys:\n  - name: %s\n    key: %s\n",
				out, out, key.KeyID(), bundle.SanitizeName(out), key.String())
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write NAME.key and NAME.pub")
	cmd.Flags().StringVar(&passwordFile, "password-file", "", "encrypt the secret key with the password in this file")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing key files")
	return cmd
}

func newSignCmd() *cobra.Command {
	var keyFile, passwordFile string
	cmd := &cobra.Command{
		Use:   "sign MODULE --key NAME.key",
		Short: "Sign a module and its manifest",
		Long: `Sign writes MODULE.wasm.minisig beside the module. The signature covers the
module bytes; its signed trusted comment binds the module name and the
sha256 of the manifest (moat.yaml), so changing one byte of either fails
verification.

For an interpreted plugin (a directory with moat.yaml, language javascript
or python, and main.js or main.py) it writes NAME.minisig beside moat.yaml,
covering the plugin's source files in a canonical form (a tar of the
files in name order) in place of module bytes.`,
		Example: "  moat sign examples/hello-go --key release.key\n  moat sign examples/hello-js --key release.key",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" {
				return usagef("--key is required: the secret key file from `moat keygen`")
			}
			b, err := bundle.Open(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			raw, err := os.ReadFile(keyFile)
			if err != nil {
				return usagef("--key: %v", err)
			}
			password, err := readPassword(passwordFile)
			if err != nil {
				return err
			}
			key, err := policy.ParsePrivateKey(raw, password)
			if err != nil {
				return usagef("--key %s: %v", keyFile, err)
			}
			sig, err := policy.Sign(key, policy.Signed{Name: b.Name, Module: b.Signed, Manifest: b.ManifestBytes})
			if err != nil {
				return err
			}
			if err := os.WriteFile(b.SignaturePath, sig, 0o644); err != nil {
				return err
			}
			what := "module " + b.Path
			if b.ManifestPath != "" {
				what += " and manifest " + b.ManifestPath
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s with key %s\nwrote %s\n", what, key.Public().KeyID(), b.SignaturePath)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "secret key file (NAME.key from moat keygen)")
	cmd.Flags().StringVar(&passwordFile, "password-file", "", "file holding the secret key's password")
	return cmd
}

func newVerifyCmd(g *globalFlags) *cobra.Command {
	var pubFiles []string
	cmd := &cobra.Command{
		Use:   "verify MODULE [--key NAME.pub]...",
		Short: "Check a module's signature against public keys or the profile's trusted keys",
		Long: `Verify checks MODULE.wasm.minisig against the given public keys, or, without
--key, against the trusted_keys of --profile. It says who signed and what
the signature covers, or exactly why it fails (unsigned, untrusted key,
changed module, changed manifest, signature of another module).`,
		Example: "  moat verify examples/hello-go --key release.pub\n  moat verify examples/hello-go --profile ops.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := bundle.Open(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			trusted := map[string]policy.PublicKey{}
			for _, f := range pubFiles {
				raw, err := os.ReadFile(f)
				if err != nil {
					return usagef("--key: %v", err)
				}
				k, err := policy.ParsePublicKey(string(raw))
				if err != nil {
					return usagef("--key %s: %v", f, err)
				}
				trusted[strings.TrimSuffix(f, ".pub")] = k
			}
			if len(pubFiles) == 0 {
				p, err := g.loadProfile()
				if err != nil {
					return err
				}
				if trusted, err = p.TrustedPublicKeys(); err != nil {
					return err
				}
				if len(trusted) == 0 {
					return usagef("profile %s trusts no keys; pass --key NAME.pub or a --profile with trusted_keys", p.Name)
				}
			}
			if b.Signature == nil {
				return &host.Error{Module: b.Name, Code: abi.CodeDenied, Reason: "unsigned: no " + b.SignaturePath + "; sign it with `moat sign`"}
			}
			v, err := policy.Verify(trusted, policy.Signed{Name: b.Name, Module: b.Signed, Manifest: b.ManifestBytes}, b.Signature)
			if err != nil {
				return &host.Error{Module: b.Name, Code: abi.CodeDenied, Reason: err.Error(), Err: err}
			}
			manifest := "no manifest"
			if v.ManifestSHA256 != "" && b.ManifestPath != "" {
				manifest = "manifest sha256:" + v.ManifestSHA256
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s signed by %s (key id %s)\n  module sha256:%s\n  %s\n", termSafe(b.Name), termSafe(v.KeyName), termSafe(v.KeyID), v.ModuleSHA256, termSafe(manifest))
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&pubFiles, "key", nil, "public key file (NAME.pub); repeatable")
	return g.withServerConfig(cmd, "without --key, verify against its profile's trusted_keys")
}

func readPassword(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("--password-file: %v", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
