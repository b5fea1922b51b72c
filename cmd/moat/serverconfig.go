package main

import (
	"os"

	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

// serverConfig is the server configuration as moat serve reads it, for
// every command that works on the server's data (serve, keys, audit): the
// file --config names (or the defaults), the data directory --data gives
// (which wins over the file's data_dir; without a file, --data or its
// default), and the database URL of $MOAT_DATABASE_URL, which wins over
// the file's database_url, the code key of $MOAT_CODE_KEY, which wins
// over the file's code_key_file, the media URL key of $MOAT_MEDIA_KEY,
// which wins over media.url_key_file, and the secrets key of
// $MOAT_SECRETS_KEY, which wins over the file's secrets_key_file. So `moat keys create --config moat-server.yaml`
// writes keys to the store the server reads, be it SQLite in data_dir or
// a PostgreSQL database shared by replicas.
func (g *globalFlags) serverConfig(configFile string) (server.Config, error) {
	cfg := server.DefaultConfig()
	if configFile != "" {
		c, err := server.LoadConfig(configFile)
		if err != nil {
			return server.Config{}, usagef("%v", err)
		}
		cfg = c
	}
	if g.dataDir != "" || configFile == "" {
		cfg.DataDir = g.data()
	}
	if u := os.Getenv(server.EnvDatabaseURL); u != "" {
		if err := server.ValidateDatabaseURL(u); err != nil {
			return server.Config{}, usagef("$%s: %v", server.EnvDatabaseURL, err)
		}
		cfg.DatabaseURL = u
	}
	if k := os.Getenv(server.EnvCodeKey); k != "" {
		if err := server.ValidateCodeKey(k); err != nil {
			return server.Config{}, usagef("$%s: %v", server.EnvCodeKey, err)
		}
		cfg.CodeKey = k
		// Held in the config from here on; processes this one starts
		// (the native launcher inherits the environment) have no use for it.
		os.Unsetenv(server.EnvCodeKey)
	}
	if k := os.Getenv(server.EnvMediaKey); k != "" {
		if err := server.ValidateMediaKey(k); err != nil {
			return server.Config{}, usagef("$%s: %v", server.EnvMediaKey, err)
		}
		cfg.Media.URLKey = k
		os.Unsetenv(server.EnvMediaKey)
	}
	if k := os.Getenv(server.EnvReplicaSecret); k != "" {
		if err := server.ValidateReplicaSecret(k); err != nil {
			return server.Config{}, usagef("$%s: %v", server.EnvReplicaSecret, err)
		}
		cfg.Replica.Secret = k
		os.Unsetenv(server.EnvReplicaSecret)
	}
	if u := os.Getenv(server.EnvReplicaURL); u != "" {
		cfg.Replica.AdvertiseURL = u
	}
	if os.Getenv(secrets.EnvKey) != "" {
		k, err := secrets.LoadKey("")
		if err != nil {
			return server.Config{}, usagef("%v", err)
		}
		cfg.SecretsKey = k
		os.Unsetenv(secrets.EnvKey) // as the code key: no child needs it
	}
	return cfg, nil
}

// storeName names the server's store in messages: the data directory, or
// the database URL without its password.
func storeName(cfg server.Config) string { return server.RedactURL(cfg.StoreLocation()) }

// useServerConfig makes the commands that open a host (exec, toolchains
// warm) work on the data of the server configFile configures, as moat
// run --server-config does: its store (data directory or database), its
// caches and its profile, unless --data or --profile was given
// (profileGiven). An empty configFile changes nothing.
func (g *globalFlags) useServerConfig(configFile string, profileGiven bool) error {
	if configFile == "" {
		return nil
	}
	sc, err := g.serverConfig(configFile)
	if err != nil {
		return err
	}
	g.server, g.dataDir = &sc, sc.DataDir
	if !profileGiven {
		g.profile = sc.Profile
	}
	return nil
}

// withServerConfig gives cmd the --config flag of every command that opens
// the store, the compile cache or the data directory, or reads the
// profile (inspect, build, confine-check, policy check, verify, exec,
// toolchains warm): the server's configuration file, whose data_dir,
// database_url and profile the command then uses as moat serve would
// (useServerConfig; --data and --profile still win). It wraps cmd.RunE,
// so call it once RunE is set; what the command opened for the server's
// store is closed when RunE returns. One copy of the mechanism, so
// --config means the same on every command that takes it.
func (g *globalFlags) withServerConfig(cmd *cobra.Command, use string) *cobra.Command {
	var file string
	cmd.Flags().StringVar(&file, "config", "", "the server's configuration file (YAML): "+use+"; --data and --profile still win")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := g.useServerConfig(file, c.Flags().Changed("profile")); err != nil {
			return err
		}
		defer g.closeAll() // after the host, which run closes
		return run(c, args)
	}
	return cmd
}
