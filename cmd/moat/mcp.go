package main

import (
	"io"
	"log/slog"

	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newMCPCmd) }

func newMCPCmd(_ *globalFlags) *cobra.Command {
	var serverURL, keyFile string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve MCP on stdin and stdout: a moat server's tools for an agent, as the API key's user",
		Long: `moat mcp speaks the Model Context Protocol on stdin and stdout, for an MCP
client that starts its servers as commands (Claude Desktop, editors). Its
tools are what the API key may call on a running moat serve: each action
the key's roles allow, as module.action; run_code; the session tools.
Every call is a request to the server's API with the key, so the grants,
schemas, confirmations and audit are the server's. An action that needs
confirmation asks the person through the client (an elicitation).

The server and key are found as moat deploy finds them: --server, else
$MOAT_SERVER, else http://127.0.0.1:8080; --key-file, else $MOAT_API_KEY.
A client that speaks streamable HTTP can use moat serve's /mcp instead,
with the key as its bearer token.`,
		Example: `  MOAT_API_KEY=$(moat keys create --org acme --user ann) moat mcp
  moat mcp --server https://moat.example.com --key-file ~/.config/moat/key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := deployServer(serverURL)
			if err != nil {
				return err
			}
			key, err := deployKey(keyFile)
			if err != nil {
				return err
			}
			// stdout is the protocol's: the log goes to stderr.
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			return server.ServeMCP(cmd.Context(), base, key, version, io.NopCloser(cmd.InOrStdin()), nopWriteCloser{cmd.OutOrStdout()}, log)
		},
	}
	cmd.Flags().StringVar(&serverURL, "server", "", "the moat server's URL (default $"+envServer+", else http://127.0.0.1:8080)")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "a file holding the API key (default $"+envAPIKey+")")
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

var _ io.WriteCloser = nopWriteCloser{}
