package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func newInspectCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect MODULE",
		Short: "Show a module's kind, digest, actions, imports and exports",
		Long: `Inspect compiles MODULE (a .wasm file or a plugin directory), checks it as
moat would before running it, and prints what it is: its kind (moat-plugin or
wasi-command), its sha256 digest, its actions, imports and exports, and
whether its machine code came from the compilation cache. An interpreted
plugin (JavaScript, Python, Ruby) needs no build: inspect loads its sources
as moat run does, without running them, and adds its language, interpreter
and the grants its manifest asks for.`,
		Example: "  moat inspect examples/hello-go\n  moat inspect --json prog.wasm | jq .exports",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := bundle.Open(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			if b.Kind == bundle.Script {
				mf, l := b.Manifest, b.Language
				// No module file: the sources are the module, loaded as
				// moat run loads them, without running any of them.
				il, err := loadInterpreted(cmd.Context(), g, args[0], b)
				if err != nil {
					return err
				}
				defer il.close()
				if asJSON {
					out := inspectJSONOf(il.mod)
					out.Language, out.Interpreter, out.Resident = l.Info().Name, l.Info().Toolchain, il.script.Resident
					out.Grants = &mf.Capabilities
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(out)
				}
				printInfo(cmd.OutOrStdout(), il.mod.Info())
				printRoutes(cmd.OutOrStdout(), mf)
				printInterpretedInfo(cmd.OutOrStdout(), mf, l, il.script)
				printPages(cmd.OutOrStdout(), mf)
				return nil
			}
			if b.Kind == bundle.Native {
				// Loading one starts its workers: it has no module to
				// inspect (before package bundle, inspect looked for a
				// .wasm in its directory and found none).
				return usagef("%s is a native plugin (kind: native): it has no module to inspect; moat run %s ACTION runs it", args[0], args[0])
			}
			wasm, opts, err := b.LoadOptions(cmd.Context(), bundle.LoadEnv{})
			if err != nil {
				return err
			}
			h, err := newHost(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer g.closeHost(h)
			mod, err := h.Load(cmd.Context(), wasm, opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(inspectJSONOf(mod))
			}
			printInfo(cmd.OutOrStdout(), mod.Info())
			printRoutes(cmd.OutOrStdout(), mod.Manifest())
			printPages(cmd.OutOrStdout(), mod.Manifest()) // their files in its moat.pages section
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return g.withServerConfig(cmd, "load through its store and compile cache (data_dir or database_url) under its profile")
}

// inspectJSON is moat inspect --json: host.Info, with what it shares with
// GET /v1/modules/{name} (server.ModuleJSON) named and shaped as there:
// the actions as objects (name, roles, permissions, confirm) rather than
// bare names, and the manifest's version. A script that reads one reads
// the other (TestInspectMatchesModulesAPI).
type inspectJSON struct {
	host.Info
	Version string              `json:"version,omitempty"`
	Actions []server.ActionJSON `json:"actions"`
	Routes  []server.RouteJSON  `json:"routes,omitempty"`
	// An interpreted plugin's: its language, interpreter, whether its
	// instances are resident, and the grants its manifest asks for.
	Language    string               `json:"language,omitempty"`
	Interpreter string               `json:"interpreter,omitempty"`
	Resident    bool                 `json:"resident,omitempty"`
	Grants      *policy.Capabilities `json:"grants,omitempty"`
	// Pages are the manifest's pages, as GET /v1/modules/{name}/pages
	// lists them (to those who may open them).
	Pages []server.PageJSON `json:"pages,omitempty"`
}

func inspectJSONOf(mod *host.Module) inspectJSON {
	out := inspectJSON{Info: mod.Info(), Actions: []server.ActionJSON{}}
	mf := mod.Manifest()
	if mf != nil {
		out.Version = mf.Version
	}
	out.Routes = server.RoutesOf(mf)
	for _, a := range mod.Actions() {
		aj := server.ActionJSON{Name: a}
		if mf != nil {
			if ma, ok := mf.Action(a); ok {
				aj.Roles, aj.Permissions, aj.Confirm = ma.Roles, ma.Permissions, ma.Confirm
			}
		}
		out.Actions = append(out.Actions, aj)
	}
	if mf != nil {
		for _, pg := range mf.Pages {
			out.Pages = append(out.Pages, server.PageJSON{Module: mf.Name, Name: pg.Name, Title: pg.Title, Entry: pg.Entry, Roles: pg.Roles, Permissions: pg.Permissions})
		}
	}
	return out
}

// printPages lists the manifest's pages: name, title, entry and who may
// open them.
func printPages(w io.Writer, mf *policy.Manifest) {
	if mf == nil || len(mf.Pages) == 0 {
		return
	}
	fmt.Fprintln(w, "pages (shown in moat serve's console):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, pg := range mf.Pages {
		who := "anyone of the organization"
		if len(pg.Roles) > 0 {
			who = "roles " + strings.Join(pg.Roles, ", ")
		}
		if len(pg.Permissions) > 0 {
			who += "; permissions " + strings.Join(pg.Permissions, ", ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", termSafe(pg.Name), termSafe(pg.Title), termSafe(pg.Entry), who)
	}
	tw.Flush()
}

func printInfo(w io.Writer, info host.Info) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", termSafe(info.Name))
	fmt.Fprintf(tw, "kind:\t%s\n", info.Kind)
	fmt.Fprintf(tw, "digest:\tsha256:%s\n", info.Digest)
	fmt.Fprintf(tw, "size:\t%d bytes\n", info.Size)
	mem := fmt.Sprintf("%d pages initial", info.MemoryMin)
	if info.MemoryMax > 0 {
		mem += fmt.Sprintf(", %d max", info.MemoryMax)
	}
	fmt.Fprintf(tw, "memory:\t%s\n", mem)
	if info.Reactor {
		fmt.Fprintf(tw, "reactor:\tyes (_initialize runs once per instance)\n")
	}
	src := "compiled now"
	if info.Compile.FromDiskCache {
		src = "from the disk cache"
	}
	fmt.Fprintf(tw, "machine code:\t%s (%s)\n", src, info.Compile.Duration.Round(100*time.Microsecond))
	mode := info.Mode
	if info.Signer != "" {
		mode += " (signed by " + info.Signer + ")"
	}
	fmt.Fprintf(tw, "mode:\t%s\n", termSafe(mode))
	if len(info.Actions) > 0 {
		fmt.Fprintf(tw, "actions:\t%s\n", strings.Join(termSafeAll(info.Actions), ", "))
	}
	tw.Flush()
	fmt.Fprintf(w, "imports (%d):\n", len(info.Imports))
	// Import and export names are the module's own bytes.
	for _, s := range info.Imports {
		fmt.Fprintf(w, "  %s\n", termSafe(s.String()))
	}
	fmt.Fprintf(w, "exports (%d):\n", len(info.Exports))
	for _, s := range info.Exports {
		fmt.Fprintf(w, "  %s\n", termSafe(s.String()))
	}
}

// printRoutes lists the manifest's HTTP routes, each with its action and
// who may call it (policy.Route.Caller).
func printRoutes(w io.Writer, mf *policy.Manifest) {
	if mf == nil || len(mf.Routes) == 0 {
		return
	}
	fmt.Fprintf(w, "routes (%d):\n", len(mf.Routes))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i := range mf.Routes {
		r := &mf.Routes[i]
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", termSafe(r.Route), termSafe(r.Action), termSafe(r.Caller()))
	}
	tw.Flush()
}
