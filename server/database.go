package server

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/moat-sandbox/moat/host"
)

// EnvDatabaseURL names the environment variable that overrides
// database_url (Config.DatabaseURL) in moat serve and in every moat
// command that opens the server's store, so the password can come from a
// secret (deploy/kubernetes sets it from one) rather than a config file.
const EnvDatabaseURL = "MOAT_DATABASE_URL"

// EnvCodeKey names the environment variable moat serve reads the code key
// from (Config.CodeKey; it wins over code_key_file), so that it can come
// from a secret.
const EnvCodeKey = "MOAT_CODE_KEY"

// ValidateCodeKey checks a code key given outside the config file
// (EnvCodeKey): at least host.MinCodeKeyBytes characters. Its error never
// holds the key.
func ValidateCodeKey(key string) error {
	if len(key) < host.MinCodeKeyBytes {
		return fmt.Errorf("the code key is %d characters; use at least %d (openssl rand -hex 32 makes one)", len(key), host.MinCodeKeyBytes)
	}
	return nil
}

// StoreLocation is what the server's store is opened from (store.Open):
// DatabaseURL when set, else DataDir (SQLite in DataDir/moat.db).
func (c Config) StoreLocation() string {
	if c.DatabaseURL != "" {
		return c.DatabaseURL
	}
	return c.DataDir
}

// RedactURL returns s with its password hidden, for logs and messages: the
// user-info password and the password and sslpassword query parameters
// become xxxxx. A string that is not a URL (a data directory) comes back
// unchanged; a URL that does not parse comes back as a placeholder, since
// where its password ends cannot be told.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	q := u.Query()
	changed := false
	for _, k := range []string{"password", "sslpassword"} {
		if q.Has(k) {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// DatabaseEndpoint is one place the server connects to for its database:
// a TCP host and port, or (Socket set) the directory of a unix socket.
type DatabaseEndpoint struct {
	Host   string
	Port   uint16
	Socket string // the socket's directory, when Host is one
}

// DatabaseEndpoints lists every endpoint a connection to the database of
// rawURL may go to: the host (or each host of a multi-host URL) and the
// fallbacks the driver tries (sslmode=prefer's second attempt, the default
// socket directories when the URL names no host). moat serve lets its
// confined process connect to exactly these (Landlock): the pool opens
// connections long after start-up.
func DatabaseEndpoints(rawURL string) ([]DatabaseEndpoint, error) {
	cfg, err := parseDatabaseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var out []DatabaseEndpoint
	add := func(host string, port uint16) {
		e := DatabaseEndpoint{Host: host, Port: port}
		if strings.HasPrefix(host, "/") {
			e.Socket = filepath.Clean(host)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		add(f.Host, f.Port)
	}
	return out, nil
}

// checkDatabaseURL refuses what store.Open could not open as PostgreSQL.
func checkDatabaseURL(s string) error {
	_, err := parseDatabaseURL(s)
	return err
}

func parseDatabaseURL(s string) (*pgconn.Config, error) {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return nil, fmt.Errorf("%s is not a PostgreSQL URL; write it like postgres://moat:PASSWORD@db.example:5432/moat "+
			"(or postgres:///moat?host=/run/postgresql for a unix socket), or leave database_url out to keep the store in data_dir", RedactURL(s))
	}
	if _, err := url.Parse(s); err != nil {
		// url's own error quotes the whole URL, password and all.
		return nil, fmt.Errorf("%s: the URL does not parse; percent-encode special characters of the password (@ is %%40, / is %%2F, : is %%3A)", RedactURL(s))
	}
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		// pgconn's message redacts the password itself; say it once more
		// in our words.
		return nil, fmt.Errorf("%s: %s", RedactURL(s), strings.TrimPrefix(pgconnReason(err), "cannot parse "))
	}
	return cfg, nil
}

// pgconnReason is pgconn's parse error without the connection string it
// quotes (redacted by pgconn, best effort): the reason alone.
func pgconnReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "`: "); i >= 0 {
		return msg[i+3:]
	}
	return "the URL is not valid"
}

// ValidateDatabaseURL checks a database URL given outside the config file
// (EnvDatabaseURL) as database_url is checked: a PostgreSQL URL that
// parses. Its error never holds the password.
func ValidateDatabaseURL(s string) error { return checkDatabaseURL(s) }
