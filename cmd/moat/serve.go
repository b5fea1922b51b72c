package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/server"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newServeCmd) }

func newServeCmd(g *globalFlags) *cobra.Command {
	var configFile, listen string
	cmd := &cobra.Command{
		Use:   "serve [--config moat-server.yaml] [--listen ADDR]",
		Short: "Serve the HTTP API and the web console",
		Long: `Serve runs moat as a server: the /v1 HTTP API (upload modules, invoke actions,
read the audit trail, run code), the web console at /, health and readiness
probes, and Prometheus metrics.

With no configuration it listens on 127.0.0.1:8080, keeps its data in --data
(default $MOAT_DATA or ./moat-data) and applies the minimal profile. A
configuration file (--config) sets the listen address, TLS, data directory,
profiles per organization, limits, the log and the Piston-compatible routes;
its errors name the file, line and field.

Every /v1 request needs an API key: create one with ` + "`moat keys create`" + `.
SIGINT or SIGTERM shut the server down gracefully: requests in flight finish.`,
		Example: `  moat serve
  moat keys create --org acme --user ann          # prints the API key
  moat serve --config moat-server.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := server.DefaultConfig()
			if configFile != "" {
				c, err := server.LoadConfig(configFile)
				if err != nil {
					return usagef("%v", err)
				}
				cfg = c
			}
			flags := cmd.Flags()
			if g.dataDir != "" || configFile == "" {
				cfg.DataDir = g.data()
			}
			if flags.Changed("profile") || configFile == "" {
				cfg.Profile = g.profile
			}
			if flags.Changed("log-format") {
				cfg.Log.Format = g.logFormat
			}
			if flags.Changed("log-level") {
				cfg.Log.Level = g.logLevel
			}
			if listen != "" {
				cfg.Listen = listen
			}
			// Code execution (/v1/runs, the console's Run tab, the Piston
			// routes) uses the languages executor on the server's host;
			// native-path languages run in warm wrappers.
			pool := native.NewPool(2, "")
			defer pool.Close()
			cfg.NewExecutor = func(h *host.Host) (server.Executor, error) {
				return languages.NewExecutor(languages.ExecutorConfig{Host: h, BuildCacheDir: filepath.Join(cfg.DataDir, "build-cache"),
					StateDir: filepath.Join(cfg.DataDir, "lang-state"), NativePool: pool})
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := server.New(ctx, cfg)
			if err != nil {
				return err
			}
			return srv.ListenAndServe(ctx)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "server configuration file (YAML)")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address, overriding the config (default 127.0.0.1:8080)")
	return cmd
}
