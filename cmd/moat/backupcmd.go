package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/host/store/sqlite"
	"github.com/spf13/cobra"
)

func init() {
	registerCommand(newBackupCmd)
	registerCommand(newRestoreCmd)
}

// pgBackupHint is what to do instead on PostgreSQL.
const pgBackupHint = "the store is PostgreSQL (database_url): back it up with pg_dump -Fc (modules, media and audit are all in the database) and keep the key files beside it; see docs/OPERATIONS.md"

func newBackupCmd(g *globalFlags) *cobra.Command {
	var configFile, to string
	cmd := &cobra.Command{
		Use:   "backup --to FILE [--config moat-server.yaml | --data DIR]",
		Short: "Write a consistent backup of a SQLite store (database and media) while it runs",
		Long: `Backup writes the SQLite store of --data (or the server's --config) to FILE
(- for stdout): a gzip-compressed tar of a consistent copy of moat.db (one
snapshot, VACUUM INTO; writes going on meanwhile are in it whole or not at
all), the bytes of every media item that copy lists, and MANIFEST.json with
each file's size and SHA-256. The server may keep running.

Not in it: the compile cache (rebuilt on demand) and the key files the
configuration names (code_key_file, secrets_key_file, media.url_key_file):
keep those apart, as secrets; the secrets in the store cannot be opened
without secrets_key_file. For PostgreSQL use pg_dump (docs/OPERATIONS.md).`,
		Example: "  moat backup --config moat-server.yaml --to moat-$(date +%F).tar.gz\n  moat backup --data /var/lib/moat/data --to - | ssh backup-host 'cat > moat.tar.gz'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usagef("--to: name the file to write (or - for stdout)")
			}
			cfg, err := g.serverConfig(configFile)
			if err != nil {
				return err
			}
			if cfg.DatabaseURL != "" {
				return usagef("moat backup: %s", pgBackupHint)
			}
			if to == "-" {
				m, err := sqlite.Backup(cmd.Context(), cfg.DataDir, cmd.OutOrStdout())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "backed up %s: schema version %d, %d file(s)\n", cfg.DataDir, m.Schema, len(m.Files))
				return nil
			}
			if _, err := os.Lstat(to); err == nil {
				return usagef("--to %s exists; name a new file", to)
			}
			// Written beside the target and renamed at the end, so a
			// failed backup never leaves a file that looks whole.
			tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*")
			if err != nil {
				return fmt.Errorf("moat backup: %w", err)
			}
			defer os.Remove(tmp.Name())
			m, err := sqlite.Backup(cmd.Context(), cfg.DataDir, tmp)
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Rename(tmp.Name(), to); err != nil {
				return fmt.Errorf("moat backup: %w", err)
			}
			var size int64
			if fi, err := os.Stat(to); err == nil {
				size = fi.Size()
			}
			fmt.Fprintf(cmd.OutOrStdout(), "backed up %s to %s: schema version %d, %d file(s), %d bytes\n", cfg.DataDir, to, m.Schema, len(m.Files), size)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the archive to write (a new file), or - for stdout")
	cmd.Flags().StringVar(&configFile, "config", "", "the server's configuration file (YAML): back up its data_dir")
	return cmd
}

func newRestoreCmd(g *globalFlags) *cobra.Command {
	var configFile string
	var force bool
	cmd := &cobra.Command{
		Use:   "restore FILE [--config moat-server.yaml | --data DIR] [--force]",
		Short: "Restore a SQLite store from a moat backup, after checking all of it",
		Long: `Restore unpacks a backup made by moat backup (FILE, or - for stdin) into the
data directory of --data (or the server's --config). It checks the whole
archive first — every entry a file a backup holds (no path can leave the
directory), the manifest's sizes and SHA-256, the database whole and of a
schema this moat can open, its media all there — and writes nothing when
anything is wrong.

It refuses while a moat process (moat serve, moat run) has the store open:
stop the server first. Over an existing store it refuses unless --force,
which moves the old moat.db and media aside to DIR/pre-restore-<time>/.
For PostgreSQL use pg_restore (docs/OPERATIONS.md).`,
		Example: "  moat restore moat-2026-12-01.tar.gz --config moat-server.yaml --force",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.serverConfig(configFile)
			if err != nil {
				return err
			}
			if cfg.DatabaseURL != "" {
				return usagef("moat restore: %s", strings.Replace(pgBackupHint, "back it up with pg_dump -Fc", "restore it with pg_restore", 1))
			}
			var r io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fmt.Errorf("moat restore: %w", err)
				}
				defer f.Close()
				r = f
			}
			rep, err := sqlite.Restore(cmd.Context(), r, cfg.DataDir, sqlite.RestoreOptions{Force: force})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s: schema version %d, %d file(s), made %s\n", args[0], cfg.DataDir, rep.Manifest.Schema, len(rep.Manifest.Files), rep.Manifest.Created.Format("2006-01-02T15:04:05Z"))
			if rep.Aside != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "the store it replaced is in %s\n", rep.Aside)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace a store the directory holds, moving it aside to DIR/pre-restore-<time>/")
	cmd.Flags().StringVar(&configFile, "config", "", "the server's configuration file (YAML): restore into its data_dir")
	return cmd
}
