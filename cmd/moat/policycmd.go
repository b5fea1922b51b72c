package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/policy"
	"github.com/spf13/cobra"
)

func newPolicyCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check manifests against operator profiles",
	}
	var signedBy string
	check := &cobra.Command{
		Use:   "check MANIFEST [--profile P]",
		Short: "Show what a profile grants a module, and every refusal",
		Long: `Check reads a module manifest (moat.yaml, or a plugin directory holding one)
and an operator profile, and prints the effective grants: what the module
asks for, what the profile grants, what it refuses and by which rule, the
effective limits, the requirements of each action, and whether the module
would load. When the module and its signature lie beside the manifest,
the signature decides between trusted and sandboxed mode.

Exit status: 0 when the module would load, 3 when it would be refused.`,
		Example: "  moat policy check examples/hello-go/moat.yaml\n  moat policy check examples/hello-go --profile ops.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if st, err := os.Stat(path); err == nil && st.IsDir() {
				path = filepath.Join(path, policy.ManifestFile)
			}
			m, err := policy.LoadManifest(path)
			if err != nil {
				return usagef("%v", err)
			}
			p, err := g.loadProfile()
			if err != nil {
				return err
			}
			signer := signedBy
			if signer == "" {
				signer = signerOf(filepath.Dir(path), p)
			}
			eval := p.Evaluate(m, signer)
			fmt.Fprint(cmd.OutOrStdout(), termSafeText(eval.Report(m, p)))
			if eval.Refused {
				return exitError{code: exitDenied}
			}
			return nil
		},
	}
	check.Flags().StringVar(&signedBy, "signed-by", "", "evaluate as if signed by this trusted key name (default: verify the signature beside the module)")
	cmd.AddCommand(g.withServerConfig(check, "check against its profile"))
	return cmd
}

// signerOf verifies the signature beside the manifest's module, when there
// is one, and returns the trusted key name that signed it.
func signerOf(dir string, p *policy.Profile) string {
	b, err := bundle.Open(dir)
	if err != nil || b.Signature == nil {
		return ""
	}
	trusted, err := p.TrustedPublicKeys()
	if err != nil {
		return ""
	}
	v, err := policy.Verify(trusted, policy.Signed{Name: b.Name, Module: b.Signed, Manifest: b.ManifestBytes}, b.Signature)
	if err != nil {
		return ""
	}
	return v.KeyName
}
