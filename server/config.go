package server

import (
	"errors"
	"fmt"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/internal/yamlstrict"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
)

// Config configures a Server. DefaultConfig is what `moat serve` runs with
// when no file is given; a moat-server.yaml (ParseConfig, LoadConfig)
// overrides any part of it. The fields tagged yaml:"-" are set by the
// program embedding the server.
type Config struct {
	// Listen is the address to listen on. Default 127.0.0.1:8080: a fresh
	// server is reachable only from this machine until the operator says
	// otherwise.
	Listen string `yaml:"listen"`
	// TLS serves HTTPS with this certificate and key (PEM files). Both or
	// neither.
	TLS TLSConfig `yaml:"tls"`
	// DataDir holds the store (moat.db) unless DatabaseURL names another,
	// the compilation cache and the scratch space of interpreted plugins'
	// builds. Default host.DefaultDataDir().
	DataDir string `yaml:"data_dir"`
	// DatabaseURL, when set, is where the store lives instead of
	// DataDir/moat.db: a PostgreSQL URL (postgres://user:pass@host:5432/db,
	// or postgres:///db?host=/run/postgresql for a unix socket). Several
	// servers given the same URL are replicas of one service: API keys,
	// modules and their bytes, kv, audit, confirmations and rate buckets
	// are all in the database, so they need no shared disk, and a module
	// uploaded through one is served by all within a second. The
	// environment variable MOAT_DATABASE_URL, read by moat serve and every
	// moat command that opens the store, overrides it, so that the
	// password can come from a secret rather than this file. The password
	// is never logged: every message names the URL without it
	// (RedactURL).
	DatabaseURL string `yaml:"database_url"`
	// Migrate says whether moat serve upgrades an older schema at start:
	// "auto" applies the pending steps (logging each); "manual" never
	// does, so `moat migrate` must. Left out, SQLite migrates (after
	// copying moat.db beside it) and PostgreSQL refuses to start on an
	// older schema, naming `moat migrate`: replicas of the previous
	// release may be serving from a shared database, and an upgrade
	// they did not expect is one a rollback cannot undo
	// (docs/OPERATIONS.md). A new, empty database gets its schema either
	// way, unless manual.
	Migrate string `yaml:"migrate"`
	// Audit configures the audit trail's retention (AuditConfig).
	Audit AuditConfig `yaml:"audit"`
	// CacheDir holds compiled machine code, keyed by module content, so
	// that a restart or a second server does not compile again. Default
	// DataDir/cache.
	CacheDir string `yaml:"cache_dir"`
	// CodeKeyFile names a file holding the code key (its first line, at
	// least 32 characters; openssl rand -hex 32 makes one). Replicas
	// holding the same key share compiled machine code through the
	// database: the replica that compiles a module stores wazero's
	// compiled form, authenticated with HMAC-SHA256 under the key, and
	// the others load it (tens of milliseconds) instead of compiling
	// (seconds for a large module), at a change, at start (a restarted
	// pod's cache is empty) and at first use. Only the replicas may hold
	// the key: whoever has it can make them run machine code. Without a
	// key each replica compiles for itself, and trusts no compiled code
	// from the database. $MOAT_CODE_KEY (CodeKey) wins over it.
	CodeKeyFile string `yaml:"code_key_file"`
	// CodeKey is the code key itself, for programs embedding the server;
	// moat serve sets it from $MOAT_CODE_KEY.
	CodeKey string `yaml:"-"`
	// SecretsKeyFile names a file holding the key the operator's secrets
	// are sealed under (its first line: the standard base64 of 32 random
	// bytes, head -c 32 /dev/urandom | base64). The file must be readable
	// by its owner only (chmod 600): one that group or others can read is
	// refused. Without a key, `moat secrets` and /v1/admin/secrets say how
	// to configure one, and a request whose grant injects a secret is
	// refused. $MOAT_SECRETS_KEY (SecretsKey) wins over it. Every replica
	// needs the same key.
	SecretsKeyFile string `yaml:"secrets_key_file"`
	// SecretsKey is the key itself, for programs embedding the server;
	// moat serve sets it from $MOAT_SECRETS_KEY.
	SecretsKey *secrets.Key `yaml:"-"`
	// SecretsOldKeyFiles name files holding keys that open secrets but
	// seal none (same format and mode as secrets_key_file): during a
	// rotation of the secrets key, the key being retired (or, before
	// the switch, the one coming in), so that every replica opens
	// values under both while `moat secrets rotate-key` re-seals them.
	SecretsOldKeyFiles []string `yaml:"secrets_old_key_files"`
	// SecretsOldKeys are those keys, for programs embedding the server.
	SecretsOldKeys []*secrets.Key `yaml:"-"`
	// BuildCacheBytes bounds the code-execution build cache
	// (DataDir/build-cache): past it, the least recently used builds are
	// removed. Default 2GiB; every distinct submission is a build, so an
	// unbounded cache would fill the disk.
	BuildCacheBytes policy.ByteSize `yaml:"build_cache_bytes"`
	// Profile is the operator profile for every organization: a built-in
	// name (minimal, dev) or the path of a profile file. Default minimal.
	Profile string `yaml:"profile"`
	// Profiles gives some organizations another profile, by org name.
	Profiles map[string]string `yaml:"profiles"`
	// Limits bound requests, uploads and request rates.
	Limits Limits `yaml:"limits"`
	// Log configures the server's structured log on stderr.
	Log LogConfig `yaml:"log"`
	// ShutdownTimeout bounds how long a graceful shutdown waits for
	// in-flight requests. Default 30s.
	ShutdownTimeout policy.Duration `yaml:"shutdown_timeout"`
	// Piston configures the Piston-compatible code-execution routes.
	Piston PistonConfig `yaml:"piston"`
	// Judge0 configures the Judge0-compatible API (judge0.go).
	Judge0 Judge0Config `yaml:"judge0"`
	// Sessions configures /v1/sessions (sessions_http.go).
	Sessions SessionsConfig `yaml:"sessions"`
	// Replica is how this replica is reached by the others on one
	// database, which route a session's calls to the replica holding it
	// (replicas.go).
	Replica ReplicaConfig `yaml:"replica"`
	// MCP configures /mcp (mcp.go).
	MCP MCPConfig `yaml:"mcp"`
	// Languages configures the code executor's languages
	// (LanguagesConfig): which to warm at start.
	Languages LanguagesConfig `yaml:"languages"`
	// Modules configures module management (ModulesConfig).
	Modules ModulesConfig `yaml:"modules"`
	// HTTP is the front door: allowed Host and Origin headers,
	// connections, timeouts (HTTPConfig).
	HTTP HTTPConfig `yaml:"http"`
	// Admission bounds the invocations and runs at once, per organization
	// and in all (AdmissionConfig).
	Admission AdmissionConfig `yaml:"admission"`
	// Metrics protects /metrics and bounds its series (MetricsConfig).
	Metrics MetricsConfig `yaml:"metrics"`
	// Tasks bounds the background tasks modules enqueue and the
	// replica's share of running them (TasksConfig).
	Tasks TasksConfig `yaml:"tasks"`
	// AI configures model calls (package host/ai): the providers
	// (OpenAI-compatible APIs), the model aliases grants name, the daily
	// token budgets per organization and module, and the model knowledge
	// embeds with. Left out: no model calls, knowledge is full text.
	AI ai.Config `yaml:"ai"`
	// Media configures media items: each organization's quota, the
	// memory of image decodes, signed URLs (MediaConfig).
	Media MediaConfig `yaml:"media"`
	// Routes bounds the modules' public and webhook routes and names
	// the hosts of modules (RoutesConfig).
	Routes RoutesConfig `yaml:"routes"`
	// Families are the sections of op families this Config has no field
	// for, each decoded by the family's name into its own configuration
	// type (ops.FamilyConfig) by the same strict rules, checked by its
	// Validate, and handed to every host (host.Config.Families): a family
	// registered from elsewhere is configured here with no edit to this
	// file. A family whose configuration has nothing a file can set
	// (secrets, http) has no section.
	Families map[string]any `yaml:"-"`
	// DisableFamilies names op families the server offers none of its
	// modules: each is given to every host as ops.Disabled, so each op of
	// one is refused (denied, audited with the rule "host: family
	// disabled"), whatever a module's grants. `moat doctor --config FILE`
	// lists them.
	DisableFamilies []string `yaml:"disable_families"`

	// File is the path the configuration was read from, for messages.
	File string `yaml:"-"`
	// Executor runs code for /v1/runs and the Piston routes; nil turns
	// them off (they answer 501).
	Executor Executor `yaml:"-"`
	// NewExecutor, when set and Executor is not, makes the Executor from
	// the host of the default profile, which the server creates, and the
	// audit trail every host records to: an executor runs its WASM
	// artifacts on a host and records its native runs in that trail, and
	// the server owns both.
	NewExecutor func(*host.Host, *audit.Log) (Executor, error) `yaml:"-"`
	// MachineCacheDir is every host's host.Config.MachineCacheDir: the
	// interpreters' machine code and start images, kept once per machine
	// (moat serve gives the toolchains' state, toolchains.StateDir).
	MachineCacheDir string `yaml:"-"`
	// ScriptBuilder builds uploaded interpreted plugins for their
	// interpreters (bundle.ScriptBuilder); nil is bundle.Builder{}, the
	// languages registered in package languages with the toolchains of
	// toolchains.Dir(). It is the server's one door to the languages for
	// plugins, as Executor is for runs.
	ScriptBuilder bundle.ScriptBuilder `yaml:"-"`
	// BeforeServe, when set, runs in ListenAndServe once the listener is
	// bound and before the first request: where moat serve confines the
	// process (it knows the port then, and nothing is served unconfined).
	BeforeServe func(ln net.Listener) error `yaml:"-"`
	// Logger replaces the logger built from Log.
	Logger *slog.Logger `yaml:"-"`
}

// TLSConfig names the PEM certificate and key of an HTTPS listener.
type TLSConfig struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Limits bound what one request may cost.
type Limits struct {
	// MaxRequestBytes bounds a request body (invocation input, run
	// sources). Default 1MiB.
	MaxRequestBytes policy.ByteSize `yaml:"max_request_bytes"`
	// MaxModuleBytes bounds an upload (module, manifest and signature, or
	// the archive). Default 64MiB.
	MaxModuleBytes policy.ByteSize `yaml:"max_module_bytes"`
	// KeyRate and KeyBurst are the token bucket of each API key:
	// requests per second, and how many may come at once. Defaults 100
	// and 200.
	KeyRate  float64 `yaml:"key_rate"`
	KeyBurst int     `yaml:"key_burst"`
	// OrgRate and OrgBurst are the token bucket shared by all keys of an
	// organization. Defaults 500 and 1000.
	OrgRate  float64 `yaml:"org_rate"`
	OrgBurst int     `yaml:"org_burst"`
	// InvocationTimeout is the default wall-clock limit of an invocation;
	// a module's manifest and the profile may lower it. Default 10s.
	InvocationTimeout policy.Duration `yaml:"invocation_timeout"`
	// MaxRunResponseBytes bounds the output one POST /v1/runs answers
	// with, over all the jobs of a batch, as encoded in JSON: the server
	// holds the whole response in memory. Default 8MiB; at most 256MiB.
	MaxRunResponseBytes policy.ByteSize `yaml:"max_run_response_bytes"`
	// MaxTableElements bounds the references all of a module's tables may
	// hold (8 bytes of host memory each, which no memory limit counts): a
	// module declaring more is refused at upload, and table.grow past it
	// fails. Default 1048576 (8 MiB of host memory per instance); at most
	// 134217728.
	MaxTableElements int `yaml:"max_table_elements"`
	// Budget bounds what the host holds and writes for one invocation
	// (package host/budget); past a limit the guest's op is refused with
	// resource_exhausted or too_large, naming the limit's key.
	Budget BudgetLimits `yaml:"budget"`
	// Archive bounds what an uploaded archive inflates to (ArchiveLimits).
	Archive ArchiveLimits `yaml:"archive"`
	// ModuleQuota bounds the module versions each organization keeps
	// (ModuleQuotaConfig).
	ModuleQuota ModuleQuotaConfig `yaml:"module_quota"`
}

// BudgetLimits are the host budget of each invocation (budget.Limits),
// as limits.budget in the server config. A field left out keeps its
// default; the defaults are generous for real plug-ins and small next to
// the server: an invocation holds at most 16 MiB of transport buffers.
type BudgetLimits struct {
	// HeldBytes bounds the bytes the host holds for an invocation at
	// once: partial request lines and unread replies of the device file,
	// op requests being copied, HTTP bodies in transit. Default 16MiB;
	// from 64KiB to 1GiB, and at least each HTTP body limit.
	HeldBytes policy.ByteSize `yaml:"held_bytes"`
	// OpenDevices bounds the descriptors of /dev/moat/ops an invocation
	// has open at once. Default 16; from 1 to 1024.
	OpenDevices int `yaml:"open_devices"`
	// LogBytes and LogRecords bound what log.write adds to the server's
	// log in one invocation. Defaults 1MiB (from 32KiB, one record of the
	// largest size, to 1GiB) and 1000 (from 1 to 1000000).
	LogBytes   policy.ByteSize `yaml:"log_bytes"`
	LogRecords int             `yaml:"log_records"`
	// AuditRows bounds the op events one invocation adds to the audit
	// trail; past it, its ops are refused before they run, so no op goes
	// unaudited. Default 1000; from 1 to 1000000.
	AuditRows int `yaml:"audit_rows"`
	// HTTPRequestBytes and HTTPResponseBytes bound one request body and
	// one response body of an Extism plug-in's http_request. Defaults
	// 8MiB; from 1KiB to held_bytes.
	HTTPRequestBytes  policy.ByteSize `yaml:"http_request_bytes"`
	HTTPResponseBytes policy.ByteSize `yaml:"http_response_bytes"`
}

// Limits returns the host's form of b.
func (b BudgetLimits) Limits() budget.Limits {
	return budget.Limits{
		HeldBytes: int64(b.HeldBytes), OpenDevices: b.OpenDevices,
		LogBytes: int64(b.LogBytes), LogRecords: b.LogRecords, AuditRows: b.AuditRows,
		HTTPRequestBytes: int64(b.HTTPRequestBytes), HTTPResponseBytes: int64(b.HTTPResponseBytes),
	}
}

// LanguagesConfig configures the code executor's languages.
type LanguagesConfig struct {
	// Warm names languages whose first-time work (Go's standard library,
	// an interpreter's compile to machine code) the server does at start,
	// in the background, rather than in someone's first run. GET
	// /v1/languages shows each as preparing while it runs.
	Warm []string `yaml:"warm"`
}

// LogConfig configures the log.
type LogConfig struct {
	Format string `yaml:"format"` // text (default) or json
	Level  string `yaml:"level"`  // debug, info (default), warn, error
}

// PistonConfig turns on POST {prefix}/execute and GET {prefix}/runtimes,
// which accept Piston's requests unchanged. Piston clients send no
// credentials, so every request runs as Principal, with its own limits and
// rate, and only from the networks in Allow.
type PistonConfig struct {
	Enabled bool `yaml:"enabled"`
	// Prefix is where the routes live. Default /api/v2, Piston's own.
	Prefix string `yaml:"prefix"`
	// Principal is who Piston requests run as. Default user piston of
	// org piston.
	Principal PrincipalConfig `yaml:"principal"`
	// Limits cap each job; a request may ask for less, never more.
	Limits PistonLimits `yaml:"limits"`
	// Allow lists the client networks (CIDR) that may call the routes.
	// Default: loopback only (127.0.0.0/8 and ::1/128).
	Allow []string `yaml:"allow"`

	allow []netip.Prefix
}

// PrincipalConfig is a principal in a configuration file.
type PrincipalConfig struct {
	User  string   `yaml:"user"`
	Org   string   `yaml:"org"`
	Roles []string `yaml:"roles"`
}

// PistonLimits cap each Piston job and the rate of jobs.
type PistonLimits struct {
	RunTimeout     policy.Duration `yaml:"run_timeout"`     // default 3s, as Piston
	CompileTimeout policy.Duration `yaml:"compile_timeout"` // default 10s, as Piston
	Memory         policy.ByteSize `yaml:"memory"`          // default 256MiB
	MaxOutput      policy.ByteSize `yaml:"max_output"`      // per stream; default 64KiB
	Rate           float64         `yaml:"rate"`            // jobs per second; default 5
	Burst          int             `yaml:"burst"`           // default 10
}

// DefaultConfig is the configuration of `moat serve` without a file.
func DefaultConfig() Config {
	var c Config
	c.fillDefaults()
	return c
}

func (c *Config) fillDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Listen, "127.0.0.1:8080")
	def(&c.DataDir, host.DefaultDataDir())
	def(&c.Profile, "minimal")
	def(&c.Log.Format, "text")
	def(&c.Log.Level, "info")
	def(&c.Piston.Prefix, "/api/v2")
	def(&c.Piston.Principal.User, "piston")
	def(&c.Piston.Principal.Org, "piston")
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = policy.Duration(30 * time.Second)
	}
	c.HTTP.fillDefaults()
	c.Admission.fillDefaults()
	c.Tasks.fillDefaults()
	c.Judge0.fillDefaults()
	c.Media.fillDefaults()
	c.Routes.fillDefaults()
	c.Metrics.fillDefaults()
	c.AI.FillDefaults()
	if c.BuildCacheBytes == 0 {
		c.BuildCacheBytes = 2 << 30
	}
	if c.Modules.MaxNativeWorkers == 0 {
		c.Modules.MaxNativeWorkers = host.DefaultNativeWorkers
	}
	if c.Modules.SharedCodeBytes == 0 {
		c.Modules.SharedCodeBytes = store.DefaultCodeBudget
	}
	if c.Modules.LoadWait == 0 {
		c.Modules.LoadWait = policy.Duration(DefaultModuleLoadWait)
	}
	if c.Modules.MaxNativeWorkersPerOrg == 0 {
		c.Modules.MaxNativeWorkersPerOrg = max(1, c.Modules.MaxNativeWorkers/4)
	}
	l := &c.Limits
	if l.MaxRequestBytes == 0 {
		l.MaxRequestBytes = 1 << 20
	}
	if l.MaxModuleBytes == 0 {
		l.MaxModuleBytes = 64 << 20
	}
	if l.KeyRate == 0 {
		l.KeyRate = 100
	}
	if l.KeyBurst == 0 {
		l.KeyBurst = 200
	}
	if l.OrgRate == 0 {
		l.OrgRate = 500
	}
	if l.OrgBurst == 0 {
		l.OrgBurst = 1000
	}
	if l.InvocationTimeout <= 0 {
		l.InvocationTimeout = policy.Duration(host.DefaultLimits.Timeout)
	}
	if l.MaxRunResponseBytes == 0 {
		l.MaxRunResponseBytes = MaxRunResponseBytes
	}
	if l.MaxTableElements == 0 {
		l.MaxTableElements = wasmrewrite.DefaultMaxTableElements
	}
	b, d := &l.Budget, budget.DefaultLimits
	if b.HeldBytes == 0 {
		b.HeldBytes = policy.ByteSize(d.HeldBytes)
	}
	if b.OpenDevices == 0 {
		b.OpenDevices = d.OpenDevices
	}
	if b.LogBytes == 0 {
		b.LogBytes = policy.ByteSize(d.LogBytes)
	}
	if b.LogRecords == 0 {
		b.LogRecords = d.LogRecords
	}
	if b.AuditRows == 0 {
		b.AuditRows = d.AuditRows
	}
	if b.HTTPRequestBytes == 0 {
		b.HTTPRequestBytes = policy.ByteSize(d.HTTPRequestBytes)
	}
	if b.HTTPResponseBytes == 0 {
		b.HTTPResponseBytes = policy.ByteSize(d.HTTPResponseBytes)
	}
	l.Archive.fillDefaults()
	l.ModuleQuota.fillDefaults()
	p := &c.Piston.Limits
	if p.RunTimeout <= 0 {
		p.RunTimeout = policy.Duration(3 * time.Second)
	}
	if p.CompileTimeout <= 0 {
		p.CompileTimeout = policy.Duration(10 * time.Second)
	}
	if p.Memory == 0 {
		p.Memory = 256 << 20
	}
	if p.MaxOutput == 0 {
		p.MaxOutput = 64 << 10
	}
	if p.Rate == 0 {
		p.Rate = 5
	}
	if p.Burst == 0 {
		p.Burst = 10
	}
	if c.Piston.Allow == nil {
		c.Piston.Allow = []string{"127.0.0.0/8", "::1/128"}
	}
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("server config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses and validates a configuration file; fields it does not
// set keep DefaultConfig's values. Every error is a *policy.FileError that
// names the file, the line and the field, and says how to fix it.
func ParseConfig(file string, data []byte) (Config, error) {
	var c Config
	ix, err := yamlstrict.Decode(file, data, &c, configYAML)
	if err != nil {
		return Config{}, err
	}
	c.Families = ix.Sections()
	c.fillDefaults()
	c.File = file
	return c, c.validate(ix)
}

// FamilyConfigs is what the server's hosts are given as
// host.Config.Families: base (what the server makes once and shares: the
// model service, the vault, the decode bound), the sections of families
// this Config has no field for, and ops.Disabled for each family
// DisableFamilies names, over anything else.
func (c *Config) FamilyConfigs(base map[string]any) map[string]any {
	for name, fc := range c.Families {
		if base[name] == nil {
			base[name] = fc
		}
	}
	for _, name := range c.DisableFamilies {
		base[name] = ops.Disabled
	}
	return base
}

// configYAML is how a server config differs from a manifest for the strict
// decoder: an empty file is the defaults.
var configYAML = &yamlstrict.Options{Sections: familySection, Shapes: map[reflect.Type]yamlstrict.Shape{
	reflect.TypeFor[policy.Duration](): yamlstrict.Scalar("a duration like 30s", func(s string) error {
		_, err := policy.ParseDuration(s)
		return err
	}),
	reflect.TypeFor[policy.ByteSize](): yamlstrict.Scalar("a size like 64MiB", func(s string) error {
		_, err := policy.ParseByteSize(s)
		return err
	}),
}}

// familySection is a new configuration of the op family named key, for
// its section of the file; nil when no family has that name or its
// configuration has nothing a file can set.
func familySection(key string) any {
	cfg, ok := ops.FamilyConfig(key)
	if !ok {
		return nil
	}
	t := reflect.TypeOf(cfg)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	for i := range t.Elem().NumField() {
		if f := t.Elem().Field(i); f.IsExported() && f.Tag.Get("yaml") != "-" {
			return cfg
		}
	}
	return nil
}

// validate checks what the types cannot: addresses, pairs of fields,
// ranges. ix locates fields in the file (nil for the defaults).
func (c *Config) validate(ix *yamlstrict.Index) error {
	fail := func(field, format string, args ...any) error {
		e := &policy.FileError{File: c.File, Field: field, Msg: fmt.Sprintf(format, args...)}
		if c.File == "" {
			e.File = "server config"
		}
		if ix != nil {
			if n := ix.Node(field); n != nil {
				e.Line, e.Column = n.Line, n.Column
			}
		}
		return e
	}
	for i, name := range c.Languages.Warm {
		if err := checkWarm(name); err != nil {
			return fail(fmt.Sprintf("languages.warm[%d]", i), "%v", err)
		}
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		return fail("listen", "%q is not host:port (%v); write it like 127.0.0.1:8080, or :8080 for every interface", c.Listen, err)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fail("listen", "port %q is not a number from 0 to 65535", port)
	}
	if c.DatabaseURL != "" {
		if err := checkDatabaseURL(c.DatabaseURL); err != nil {
			return fail("database_url", "%v", err)
		}
	}
	if _, err := c.MigrateMode(); err != nil {
		return fail("migrate", "%v", err)
	}
	if err := c.MCP.check(); err != nil {
		return fail("mcp.authorization_servers", "%v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Families)) {
		if err := ops.ValidateFamilyConfig(name, c.Families[name]); err != nil {
			return fail(name, "%v", err)
		}
	}
	for i, name := range c.DisableFamilies {
		if !slices.Contains(ops.Families(), name) {
			return fail(fmt.Sprintf("disable_families[%d]", i), "no op family %q; the families are %s", name, strings.Join(ops.Families(), ", "))
		}
	}
	if err := c.Audit.validate(); err != nil {
		return fail("audit.retention", "%v", err)
	}
	if c.CodeKeyFile != "" && c.CodeKey == "" {
		b, err := os.ReadFile(c.CodeKeyFile)
		if err != nil {
			return fail("code_key_file", "%v", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		key := strings.TrimSpace(line)
		if len(key) < host.MinCodeKeyBytes {
			return fail("code_key_file", "the key in %s is %d characters; use at least %d (openssl rand -hex 32 makes one)", c.CodeKeyFile, len(key), host.MinCodeKeyBytes)
		}
		c.CodeKey = key
	}
	if c.SecretsKeyFile != "" && c.SecretsKey == nil {
		k, err := secrets.LoadKeyFile(c.SecretsKeyFile)
		if err != nil {
			return fail("secrets_key_file", "%v", err)
		}
		c.SecretsKey = k
	}
	if len(c.SecretsOldKeyFiles) > 8 {
		return fail("secrets_old_key_files", "%d files; a rotation needs one old key, at most 8", len(c.SecretsOldKeyFiles))
	}
	if len(c.SecretsOldKeyFiles) > 0 && len(c.SecretsOldKeys) == 0 {
		for _, f := range c.SecretsOldKeyFiles {
			k, err := secrets.LoadKeyFile(f)
			if err != nil {
				return fail("secrets_old_key_files", "%v", err)
			}
			c.SecretsOldKeys = append(c.SecretsOldKeys, k)
		}
	}
	if c.CodeKey != "" {
		if err := ValidateCodeKey(c.CodeKey); err != nil {
			return fail("code_key", "%v ($%s)", err, EnvCodeKey)
		}
	}
	if n := c.Modules.SharedCodeBytes; n < store.MaxCodeArtifactBytes || n > 1<<40 {
		return fail("modules.shared_code_bytes", "%s is outside 256 MiB (the largest artifact) to 1 TiB; leave it out for the default %s", n, policy.ByteSize(store.DefaultCodeBudget))
	}
	if n := c.Modules.MaxNativeWorkers; n < 1 || n > 4096 {
		return fail("modules.max_native_workers", "%d is outside 1..4096; remove the line for the default %d", n, host.DefaultNativeWorkers)
	}
	if n := c.Modules.MaxNativeWorkersPerOrg; n < 1 || n > c.Modules.MaxNativeWorkers {
		return fail("modules.max_native_workers_per_org", "%d is outside 1..%d (modules.max_native_workers); remove the line for a quarter of max_native_workers", n, c.Modules.MaxNativeWorkers)
	}
	if d := time.Duration(c.Modules.LoadWait); d < time.Millisecond || d > 10*time.Minute {
		return fail("modules.load_wait", "%s is outside 1ms to 10m; remove the line for the default %s", c.Modules.LoadWait, DefaultModuleLoadWait)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return fail("tls", "give both cert and key (PEM files), or neither to serve plain HTTP")
	}
	if _, err := policy.LoadProfile(c.Profile); err != nil {
		return fail("profile", "%v", err)
	}
	for org, p := range c.Profiles {
		if err := (policy.Principal{Org: org, User: "x"}).Validate(); err != nil {
			return fail("profiles."+org, "%v", err)
		}
		if _, err := policy.LoadProfile(p); err != nil {
			return fail("profiles."+org, "%v", err)
		}
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return fail("log.format", "%q is not a log format; use text or json", c.Log.Format)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Log.Level)); err != nil {
		return fail("log.level", "%q is not a level; use debug, info, warn or error", c.Log.Level)
	}
	l := c.Limits
	switch {
	case l.KeyRate < 0:
		return fail("limits.key_rate", "%v is negative; give requests per second, like 100", l.KeyRate)
	case l.OrgRate < 0:
		return fail("limits.org_rate", "%v is negative; give requests per second, like 500", l.OrgRate)
	case l.KeyBurst < 1:
		return fail("limits.key_burst", "%d: the burst must be at least 1", l.KeyBurst)
	case l.OrgBurst < 1:
		return fail("limits.org_burst", "%d: the burst must be at least 1", l.OrgBurst)
	case l.MaxRequestBytes > 64<<20:
		return fail("limits.max_request_bytes", "%s is more than the 64MiB an invocation input can be; lower it", l.MaxRequestBytes)
	case l.MaxRunResponseBytes < 64<<10 || l.MaxRunResponseBytes > 256<<20:
		return fail("limits.max_run_response_bytes", "%s is outside 64KiB to 256MiB: the server holds a whole /v1/runs response in memory; the default is %s",
			l.MaxRunResponseBytes, policy.ByteSize(MaxRunResponseBytes))
	case l.MaxTableElements < 1 || l.MaxTableElements > wasmrewrite.MaxTableElementsCeiling:
		return fail("limits.max_table_elements", "%d is outside 1 to %d (8 bytes of host memory each); leave it out for the default %d",
			l.MaxTableElements, wasmrewrite.MaxTableElementsCeiling, wasmrewrite.DefaultMaxTableElements)
	}
	if err := l.Budget.validate(fail); err != nil {
		return err
	}
	if err := l.Archive.validate(fail); err != nil {
		return err
	}
	if err := l.ModuleQuota.validate(fail); err != nil {
		return err
	}
	if err := c.checkModuleGrants(fail); err != nil {
		return err
	}
	if err := c.HTTP.validate(fail); err != nil {
		return err
	}
	if err := c.Admission.validate(fail); err != nil {
		return err
	}
	if err := c.Metrics.validate(fail); err != nil {
		return err
	}
	if err := c.Judge0.validate(fail); err != nil {
		return err
	}
	if err := c.Tasks.validate(fail, c.Admission.MaxInvocations); err != nil {
		return err
	}
	if err := c.AI.Validate(); err != nil {
		var ce *ai.ConfigError
		if errors.As(err, &ce) {
			return fail("ai."+ce.Field, "%s", ce.Msg)
		}
		return fail("ai", "%v", err)
	}
	if err := c.Routes.validate(fail); err != nil {
		return err
	}
	if err := c.Media.validate(fail); err != nil {
		return err
	}
	if err := c.Replica.validate(fail); err != nil {
		return err
	}
	p := &c.Piston
	if !strings.HasPrefix(p.Prefix, "/") || strings.HasSuffix(p.Prefix, "/") || strings.HasPrefix(p.Prefix, "/v1") {
		return fail("piston.prefix", "%q must start with / and not end with one, outside /v1; Piston's own is /api/v2", p.Prefix)
	}
	if err := (policy.Principal{User: p.Principal.User, Org: p.Principal.Org}).Validate(); err != nil {
		return fail("piston.principal", "%v", err)
	}
	if p.Limits.Rate < 0 || p.Limits.Burst < 1 {
		return fail("piston.limits", "rate must be positive and burst at least 1")
	}
	p.allow = p.allow[:0]
	for i, s := range p.Allow {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				pre = netip.PrefixFrom(a, a.BitLen())
			} else {
				return fail(fmt.Sprintf("piston.allow[%d]", i), "%q is not a network; write it as CIDR like 10.0.0.0/8 or an address like 10.1.2.3", s)
			}
		}
		p.allow = append(p.allow, pre.Masked())
	}
	return nil
}

// validate checks each budget limit's range, and that held_bytes, which
// holds every HTTP body in transit, can hold the largest one.
func (b BudgetLimits) validate(fail func(field, format string, args ...any) error) error {
	const k = "limits.budget."
	sizes := []struct {
		field    string
		v        policy.ByteSize
		min, max policy.ByteSize
		why      string
	}{
		{"held_bytes", b.HeldBytes, 64 << 10, 1 << 30, "it bounds every buffer the host keeps for one invocation at once"},
		{"log_bytes", b.LogBytes, abi.MaxLogRecord, 1 << 30, "the least holds one log record of the largest size"},
		{"http_request_bytes", b.HTTPRequestBytes, 1 << 10, 1 << 30, "it bounds one request body"},
		{"http_response_bytes", b.HTTPResponseBytes, 1 << 10, 1 << 30, "it bounds one response body"},
	}
	for _, s := range sizes {
		if s.v < s.min || s.v > s.max {
			return fail(k+s.field, "%s is outside %s to %s (%s); leave it out for the default", s.v, s.min, s.max, s.why)
		}
	}
	counts := []struct {
		field    string
		v        int
		min, max int
	}{
		{"open_devices", b.OpenDevices, 1, 1024},
		{"log_records", b.LogRecords, 1, 1_000_000},
		{"audit_rows", b.AuditRows, 1, 1_000_000},
	}
	for _, c := range counts {
		if c.v < c.min || c.v > c.max {
			return fail(k+c.field, "%d is outside %d to %d; leave it out for the default", c.v, c.min, c.max)
		}
	}
	for _, h := range []struct {
		field string
		v     policy.ByteSize
	}{{"http_request_bytes", b.HTTPRequestBytes}, {"http_response_bytes", b.HTTPResponseBytes}} {
		if h.v > b.HeldBytes {
			return fail(k+h.field, "%s is more than held_bytes (%s), which holds every HTTP body in transit, so no body could reach it; raise limits.budget.held_bytes or lower this",
				h.v, b.HeldBytes)
		}
	}
	return nil
}

// allowed reports whether a Piston request from addr may be served.
func (p *PistonConfig) allowed(addr netip.Addr) bool {
	addr = addr.Unmap()
	return slices.ContainsFunc(p.allow, func(pre netip.Prefix) bool { return pre.Contains(addr) })
}

// ModulesConfig configures module management, as modules in the server
// config.
type ModulesConfig struct {
	// AllowSignedRollback lets a module whose current version is signed
	// by a trusted key be replaced by a trusted-signed version that is not
	// newer (by manifest version). Default false: a signed release cannot
	// be put back over a newer one (see checkRollback); to roll back on
	// purpose, delete the module first, or turn this on for the while.
	AllowSignedRollback bool `yaml:"allow_signed_rollback"`
	// AllowNative lets organizations upload native plugins (kind: native):
	// native code run as confined long-lived workers (their own uid,
	// cgroup, root filesystem, no network, Landlock, seccomp), which needs
	// root and the kernel layers. Default false: a server runs only
	// WebAssembly unless its operator says otherwise.
	AllowNative bool `yaml:"allow_native"`
	// MaxNativeWorkers bounds the native plugin workers of all
	// organizations at once (each a process with its own memory limit):
	// a plugin that would start past it is refused at load (503), one
	// that would grow past it waits for its own workers. Default 32;
	// from 1 to 4096.
	MaxNativeWorkers int `yaml:"max_native_workers"`
	// MaxNativeWorkersPerOrg bounds one organization's share of them, so
	// that no organization's plugins can take every worker. Default a
	// quarter of max_native_workers (at least 1); from 1 to
	// max_native_workers.
	MaxNativeWorkersPerOrg int `yaml:"max_native_workers_per_org"`
	// SharedCodeBytes bounds the compiled code the replicas keep in the
	// database when they share it (code_key_file): past it, the least
	// recently used artifacts are evicted (a module whose code was
	// evicted is compiled once more by the next replica that loads it,
	// which stores it again). Default 2GiB; from 256MiB (the largest
	// artifact shared) to 1TiB.
	SharedCodeBytes policy.ByteSize `yaml:"shared_code_bytes"`
	// LoadWait bounds how long a request waits for a module this replica
	// is loading on demand (a module the store holds that was uploaded
	// or changed through another replica and is not loaded here yet):
	// past it the request is answered 503 with Retry-After, and the load
	// goes on. Default 30s; from 1ms to 10m.
	LoadWait policy.Duration `yaml:"load_wait"`
}

// ModuleQuotaConfig bounds the module versions each organization keeps,
// as limits.module_quota in the server config. Old versions are pruned at
// upload by store.ModuleQuota's rule: each module keeps its newest
// keep_per_module versions, then the organization's oldest versions that
// are not current go until it is within bytes and versions; a current
// version is never pruned, and an upload that cannot fit even so is
// refused (413 quota_exceeded).
type ModuleQuotaConfig struct {
	// Bytes bounds the sizes of all versions of all the organization's
	// modules. Default 1GiB; from 1KiB to 1TiB.
	Bytes policy.ByteSize `yaml:"bytes"`
	// Versions bounds their number. Default 200; from 1 to 100000.
	Versions int `yaml:"versions"`
	// KeepPerModule is how many versions of each module are kept, the
	// current one included. Default 5; from 1 to 1000.
	KeepPerModule int `yaml:"keep_per_module"`
}

// Defaults of ModuleQuotaConfig.
const (
	DefaultModuleQuotaBytes    = 1 << 30
	DefaultModuleQuotaVersions = 200
	DefaultModuleKeepPerModule = 5
)

func (q *ModuleQuotaConfig) fillDefaults() {
	if q.Bytes == 0 {
		q.Bytes = DefaultModuleQuotaBytes
	}
	if q.Versions == 0 {
		q.Versions = DefaultModuleQuotaVersions
	}
	if q.KeepPerModule == 0 {
		q.KeepPerModule = DefaultModuleKeepPerModule
	}
}

func (q ModuleQuotaConfig) validate(fail func(field, format string, args ...any) error) error {
	const k = "limits.module_quota."
	switch {
	case q.Bytes < 1<<10 || q.Bytes > 1<<40:
		return fail(k+"bytes", "%s is outside 1KiB to 1TiB; the default is %s", q.Bytes, policy.ByteSize(DefaultModuleQuotaBytes))
	case q.Versions < 1 || q.Versions > 100_000:
		return fail(k+"versions", "%d is outside 1 to 100000; the default is %d", q.Versions, DefaultModuleQuotaVersions)
	case q.KeepPerModule < 1 || q.KeepPerModule > 1000:
		return fail(k+"keep_per_module", "%d is outside 1 to 1000; the default is %d", q.KeepPerModule, DefaultModuleKeepPerModule)
	}
	return nil
}

// checkModuleGrants refuses a profile that grants by module name (its
// modules: section) when more than one organization uses it. A module's
// name is chosen by whoever uploads it, in their own organization, so in
// a shared profile modules.billing would give the grants meant for one
// organization's billing to every organization's module of that name. The
// default profile is every organization's that has none of its own.
func (c *Config) checkModuleGrants(fail func(field, format string, args ...any) error) error {
	byName := func(name string) []string {
		p, err := policy.LoadProfile(name)
		if err != nil || len(p.Modules) == 0 {
			return nil
		}
		return slices.Sorted(maps.Keys(p.Modules))
	}
	if mods := byName(c.Profile); mods != nil {
		return fail("profile", "profile %s grants by module name (modules: %s) and is the profile of every organization without one of its own, "+
			"so any organization's module named %s would get those grants; give the organization that owns them its own profile under profiles:, "+
			"or grant through a signing key (keys:) instead", c.Profile, strings.Join(mods, ", "), mods[0])
	}
	users := map[string][]string{}
	for _, org := range slices.Sorted(maps.Keys(c.Profiles)) {
		users[c.Profiles[org]] = append(users[c.Profiles[org]], org)
	}
	for _, org := range slices.Sorted(maps.Keys(c.Profiles)) {
		name := c.Profiles[org]
		if orgs := users[name]; len(orgs) > 1 {
			if mods := byName(name); mods != nil {
				return fail("profiles."+org, "profile %s grants by module name (modules: %s) and is shared by organizations %s, "+
					"so each one's module named %s would get the grants; give each organization a profile of its own",
					name, strings.Join(mods, ", "), strings.Join(orgs, ", "), mods[0])
			}
		}
	}
	return nil
}
