package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// migrations are the steps of the schema, applied in order; the schema
// version of a file (PRAGMA user_version) is the number of steps applied
// to it, and schema_migrations records each step's MinReader (see
// driver.Migration for expand and contract steps). Append new
// migrations; never edit or reorder one that has shipped.
var migrations = []driver.Migration{
	{
		Name: "kv",
		// key is compared with BINARY collation (memcmp), which the ordering
		// and prefix ranges of KVList rely on. STRICT makes SQLite refuse a
		// value of the wrong type instead of converting it.
		SQL: `
CREATE TABLE kv (
	org        TEXT    NOT NULL,
	module     TEXT    NOT NULL,
	key        TEXT    NOT NULL COLLATE BINARY,
	value      BLOB    NOT NULL,
	updated_at INTEGER NOT NULL, -- unix milliseconds
	PRIMARY KEY (org, module, key)
) STRICT, WITHOUT ROWID;
`,
	},
	{
		Name: "audit_events",
		// time is unix nanoseconds. Empty strings, not NULL, stand for an
		// absent field; attrs is a JSON object or NULL.
		SQL: `
CREATE TABLE audit_events (
	id             TEXT    NOT NULL PRIMARY KEY,
	time           INTEGER NOT NULL,
	kind           TEXT    NOT NULL,
	decision       TEXT    NOT NULL DEFAULT '',
	correlation_id TEXT    NOT NULL DEFAULT '',
	module         TEXT    NOT NULL DEFAULT '',
	action         TEXT    NOT NULL DEFAULT '',
	op             TEXT    NOT NULL DEFAULT '',
	user           TEXT    NOT NULL DEFAULT '',
	org            TEXT    NOT NULL DEFAULT '',
	rule           TEXT    NOT NULL DEFAULT '',
	reason         TEXT    NOT NULL DEFAULT '',
	code           TEXT    NOT NULL DEFAULT '',
	mutation_id    TEXT    NOT NULL DEFAULT '',
	task_id        TEXT    NOT NULL DEFAULT '',
	model_call_id  TEXT    NOT NULL DEFAULT '',
	duration_ns    INTEGER NOT NULL DEFAULT 0,
	attrs          TEXT
) STRICT;
CREATE INDEX audit_events_correlation_id ON audit_events (correlation_id);
CREATE INDEX audit_events_module_time ON audit_events (module, time);
CREATE INDEX audit_events_decision_time ON audit_events (decision, time);
CREATE INDEX audit_events_org_time ON audit_events (org, time);
CREATE INDEX audit_events_time ON audit_events (time);
`,
	},
	{
		Name: "confirmations",
		// Times are unix nanoseconds; used_at is NULL until the
		// confirmation is used. Only a hash of the token is stored.
		SQL: `
CREATE TABLE confirmations (
	token_hash   TEXT    NOT NULL PRIMARY KEY,
	org          TEXT    NOT NULL,
	user         TEXT    NOT NULL,
	module       TEXT    NOT NULL,
	action       TEXT    NOT NULL,
	input        BLOB    NOT NULL,
	input_sha256 TEXT    NOT NULL,
	summary      TEXT    NOT NULL,
	created_at   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	used_at      INTEGER
) STRICT;
CREATE INDEX confirmations_pending ON confirmations (org, created_at) WHERE used_at IS NULL;
CREATE INDEX confirmations_expires_at ON confirmations (expires_at);
CREATE INDEX confirmations_used_at ON confirmations (used_at) WHERE used_at IS NOT NULL;
`,
	},
	{
		Name: "api_keys",
		// The server's API keys. Only the SHA-256 of a key is stored (see
		// APIKey); roles is a JSON array. Times are unix nanoseconds;
		// revoked_at is NULL while the key is valid.
		SQL: `
CREATE TABLE api_keys (
	id         TEXT    NOT NULL PRIMARY KEY,
	hash       TEXT    NOT NULL UNIQUE,
	org        TEXT    NOT NULL,
	user       TEXT    NOT NULL,
	roles      TEXT    NOT NULL DEFAULT '[]',
	name       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
) STRICT;
CREATE INDEX api_keys_org ON api_keys (org, created_at);
`,
	},
	{
		Name: "server_modules",
		// Modules uploaded to the server, per organization: every version
		// (by digest) with the manifest and signature it was uploaded with,
		// and which version is current. The WebAssembly bytes live in the
		// data directory, content-addressed by digest.
		SQL: `
CREATE TABLE module_versions (
	org         TEXT    NOT NULL,
	name        TEXT    NOT NULL,
	digest      TEXT    NOT NULL,
	version     TEXT    NOT NULL DEFAULT '',
	size        INTEGER NOT NULL,
	manifest    BLOB,
	signature   BLOB,
	uploaded_by TEXT    NOT NULL DEFAULT '',
	uploaded_at INTEGER NOT NULL,
	PRIMARY KEY (org, name, digest)
) STRICT;
CREATE TABLE modules (
	org        TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	digest     TEXT    NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (org, name),
	FOREIGN KEY (org, name, digest) REFERENCES module_versions (org, name, digest)
) STRICT;
CREATE INDEX module_versions_digest ON module_versions (digest);
`,
	},
	{
		Name: "kv_usage",
		// The bytes each (org, module) stores in kv (keys in UTF-8 bytes
		// plus values), kept by triggers in the same transaction as every
		// write, so a quota check reads one row instead of summing the
		// scope. The UPDATE trigger also fires for the DO UPDATE of a put
		// that replaces a key.
		SQL: `
CREATE TABLE kv_usage (
	org    TEXT    NOT NULL,
	module TEXT    NOT NULL,
	bytes  INTEGER NOT NULL,
	PRIMARY KEY (org, module)
) STRICT, WITHOUT ROWID;
INSERT INTO kv_usage (org, module, bytes)
	SELECT org, module, sum(octet_length(key) + length(value)) FROM kv GROUP BY org, module;
CREATE TRIGGER kv_usage_insert AFTER INSERT ON kv BEGIN
	INSERT INTO kv_usage (org, module, bytes)
	VALUES (NEW.org, NEW.module, octet_length(NEW.key) + length(NEW.value))
	ON CONFLICT (org, module) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER kv_usage_update AFTER UPDATE ON kv BEGIN
	UPDATE kv_usage SET bytes = bytes - (octet_length(OLD.key) + length(OLD.value))
		WHERE org = OLD.org AND module = OLD.module;
	INSERT INTO kv_usage (org, module, bytes)
	VALUES (NEW.org, NEW.module, octet_length(NEW.key) + length(NEW.value))
	ON CONFLICT (org, module) DO UPDATE SET bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER kv_usage_delete AFTER DELETE ON kv BEGIN
	UPDATE kv_usage SET bytes = bytes - (octet_length(OLD.key) + length(OLD.value))
		WHERE org = OLD.org AND module = OLD.module;
END;
`,
	},
	{
		Name: "confirmation_binding",
		// binding is the hex SHA-256 naming the exact module (code,
		// manifest, sources) a confirmation was requested on; a
		// confirmation is refused once its module is another. Rows from
		// before have none, so they are refused: they expire within
		// minutes anyway.
		SQL: `
ALTER TABLE confirmations ADD COLUMN binding TEXT NOT NULL DEFAULT '';
CREATE INDEX module_versions_org_time ON module_versions (org, uploaded_at);
`,
	},
	{
		Name: "user_id",
		// One schema on every backend: "user" is a reserved word in
		// PostgreSQL, so the column is user_id everywhere. A rename is a
		// contract step: a moat from before it writes "user".
		MinReader: 8,
		SQL: `
ALTER TABLE audit_events RENAME COLUMN user TO user_id;
ALTER TABLE confirmations RENAME COLUMN user TO user_id;
ALTER TABLE api_keys RENAME COLUMN user TO user_id;
`,
	},
	{
		Name: "module_blobs",
		// The bytes of modules, content-addressed by digest (hex SHA-256)
		// and shared by every organization that uploads them; written_at
		// (unix nanoseconds) is the last time they were stored, which
		// keeps a fresh blob from being deleted as an orphan before its
		// version is written (store.BlobGrace).
		SQL: `
CREATE TABLE module_blobs (
	digest     TEXT    NOT NULL PRIMARY KEY,
	data       BLOB    NOT NULL,
	written_at INTEGER NOT NULL
) STRICT;
`,
	},
	{
		Name: "module_changes",
		// The change log behind store.WatchModules: a row per write of
		// the modules table (a new or replaced current version, or a
		// deletion: digest ''), in commit order, written by triggers in
		// the same transaction; the last 10000 are kept.
		SQL: `
CREATE TABLE module_changes (
	seq    INTEGER PRIMARY KEY AUTOINCREMENT,
	org    TEXT    NOT NULL,
	name   TEXT    NOT NULL,
	digest TEXT    NOT NULL,
	at     INTEGER NOT NULL
);
CREATE TRIGGER module_changes_insert AFTER INSERT ON modules BEGIN
	INSERT INTO module_changes (org, name, digest, at) VALUES (NEW.org, NEW.name, NEW.digest, NEW.updated_at);
	DELETE FROM module_changes WHERE seq <= (SELECT max(seq) FROM module_changes) - 10000;
END;
CREATE TRIGGER module_changes_update AFTER UPDATE ON modules BEGIN
	INSERT INTO module_changes (org, name, digest, at) VALUES (NEW.org, NEW.name, NEW.digest, NEW.updated_at);
	DELETE FROM module_changes WHERE seq <= (SELECT max(seq) FROM module_changes) - 10000;
END;
CREATE TRIGGER module_changes_delete AFTER DELETE ON modules BEGIN
	INSERT INTO module_changes (org, name, digest, at) VALUES (OLD.org, OLD.name, '', OLD.updated_at);
	DELETE FROM module_changes WHERE seq <= (SELECT max(seq) FROM module_changes) - 10000;
END;
`,
	},
	{
		Name: "rate_buckets",
		// Token buckets (store.RateTake): tokens held at updated_at (unix
		// nanoseconds); taken says whether the last take got a token.
		SQL: `
CREATE TABLE rate_buckets (
	key        TEXT    NOT NULL PRIMARY KEY,
	tokens     REAL    NOT NULL,
	updated_at INTEGER NOT NULL,
	taken      INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`,
	},
	{
		Name: "audit_segments",
		// Routine audit events (allowed invocations and ops) of one
		// organization, packed by store.AuditInsert: a row per batch and
		// organization instead of a row and six index entries per event.
		// Times are unix nanoseconds; bloom is a Bloom filter over the
		// segment's correlation ids and modules; data is the store's
		// encoding of the events (see host/store/audit.go). The header
		// columns come first, so reading them never reads data's overflow
		// pages. audit_events keeps every other event, and every event
		// stored before this migration.
		SQL: `
CREATE TABLE audit_segments (
	id       INTEGER PRIMARY KEY,
	org      TEXT    NOT NULL,
	time_min INTEGER NOT NULL,
	time_max INTEGER NOT NULL,
	count    INTEGER NOT NULL,
	bloom    BLOB    NOT NULL,
	data     BLOB    NOT NULL
) STRICT;
CREATE INDEX audit_segments_org_time ON audit_segments (org, time_max);
CREATE INDEX audit_segments_time ON audit_segments (time_max);
`,
	},
	{
		Name: "code_artifacts",
		// Compiled machine code hosts share (store.CodeArtifact): the
		// artifact by its key, the MAC the host checks, and times in unix
		// nanoseconds; used_at orders eviction. data comes last, so that
		// reading the other columns (and length(data), which SQLite takes
		// from the record header) never reads its overflow pages.
		SQL: `
CREATE TABLE code_artifacts (
	key       TEXT    NOT NULL PRIMARY KEY,
	mac       BLOB    NOT NULL,
	stored_at INTEGER NOT NULL,
	used_at   INTEGER NOT NULL,
	data      BLOB    NOT NULL
) STRICT;
CREATE INDEX code_artifacts_used_at ON code_artifacts (used_at);
`,
	},
	{
		Name: "knowledge",
		// Knowledge documents (store.KnowledgeAdd) and their full-text
		// index. knowledge_fts indexes the terms the front made of each
		// document's text (never the text), each prefixed with s<id> of
		// its collection, so one collection's terms are postings of
		// their own: knowledge_vocab reads them to score a search with
		// the collection's own statistics (see knowledge.go). It is
		// contentless (the text lives in knowledge_docs) with
		// contentless_delete, and the ascii tokenizer, which splits the
		// terms (a-z 0-9) at the spaces between them. Ids never repeat
		// (AUTOINCREMENT), so a prefix or a rowid is never reused.
		// Triggers keep each collection's documents and tokens (for
		// BM25), each module's usage (for the quota) and the index in
		// the transaction of every write; an update changes a
		// document's content, never its scope.
		SQL: `
CREATE TABLE knowledge_collections (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	org        TEXT    NOT NULL,
	module     TEXT    NOT NULL,
	collection TEXT    NOT NULL,
	docs       INTEGER NOT NULL DEFAULT 0,
	tokens     INTEGER NOT NULL DEFAULT 0,
	UNIQUE (org, module, collection)
) STRICT;
CREATE TABLE knowledge_docs (
	doc        INTEGER PRIMARY KEY AUTOINCREMENT,
	coll       INTEGER NOT NULL REFERENCES knowledge_collections (id),
	tokens     INTEGER NOT NULL, -- terms indexed
	bytes      INTEGER NOT NULL, -- id + text + meta, for the quota
	updated_at INTEGER NOT NULL, -- unix nanoseconds
	org        TEXT    NOT NULL,
	module     TEXT    NOT NULL,
	collection TEXT    NOT NULL,
	id         TEXT    NOT NULL COLLATE BINARY,
	owner      TEXT    NOT NULL,
	meta       TEXT    NOT NULL, -- a JSON object of scalars
	text       TEXT    NOT NULL, -- last: scoring reads the columns before it without its overflow pages
	UNIQUE (org, module, collection, id)
) STRICT;
CREATE INDEX knowledge_docs_coll ON knowledge_docs (coll);
CREATE TABLE knowledge_usage (
	org    TEXT    NOT NULL,
	module TEXT    NOT NULL,
	docs   INTEGER NOT NULL,
	bytes  INTEGER NOT NULL,
	PRIMARY KEY (org, module)
) STRICT, WITHOUT ROWID;
CREATE VIRTUAL TABLE knowledge_fts USING fts5(terms, content='', contentless_delete=1, tokenize='ascii');
CREATE VIRTUAL TABLE knowledge_vocab USING fts5vocab(knowledge_fts, instance);
CREATE TRIGGER knowledge_docs_insert AFTER INSERT ON knowledge_docs BEGIN
	UPDATE knowledge_collections SET docs = docs + 1, tokens = tokens + NEW.tokens WHERE id = NEW.coll;
	INSERT INTO knowledge_usage (org, module, docs, bytes) VALUES (NEW.org, NEW.module, 1, NEW.bytes)
	ON CONFLICT (org, module) DO UPDATE SET docs = docs + 1, bytes = bytes + excluded.bytes;
END;
CREATE TRIGGER knowledge_docs_update AFTER UPDATE ON knowledge_docs BEGIN
	UPDATE knowledge_collections SET tokens = tokens - OLD.tokens + NEW.tokens WHERE id = NEW.coll;
	UPDATE knowledge_usage SET bytes = bytes - OLD.bytes + NEW.bytes WHERE org = NEW.org AND module = NEW.module;
	DELETE FROM knowledge_fts WHERE rowid = OLD.doc;
END;
CREATE TRIGGER knowledge_docs_delete AFTER DELETE ON knowledge_docs BEGIN
	UPDATE knowledge_collections SET docs = docs - 1, tokens = tokens - OLD.tokens WHERE id = OLD.coll;
	UPDATE knowledge_usage SET docs = docs - 1, bytes = bytes - OLD.bytes WHERE org = OLD.org AND module = OLD.module;
	DELETE FROM knowledge_fts WHERE rowid = OLD.doc;
	DELETE FROM knowledge_collections WHERE id = OLD.coll AND docs = 0;
END;
`,
	},
	{
		Name: "db_documents",
		// The db family (store/db.go): every document of every model in
		// one table, doc its canonical JSON (size its bytes: length()
		// of TEXT counts characters); created and updated are unix
		// milliseconds. Models' indexes are partial expression indexes
		// on this table, made at load (db_ix_*); the elements of an
		// indexed array field are rows of db_terms, kept in the
		// transaction of every write. db_usage counts each
		// organization's module's documents and bytes for its quota;
		// db_models keeps each module's models as last loaded, for
		// whom (owner: an organization, or '' for every one), to
		// refuse a change stored documents could not follow.
		SQL: `
CREATE TABLE db_documents (
	org     TEXT    NOT NULL,
	module  TEXT    NOT NULL,
	model   TEXT    NOT NULL,
	id      TEXT    NOT NULL,
	owner   TEXT    NOT NULL,
	version INTEGER NOT NULL,
	created INTEGER NOT NULL,
	updated INTEGER NOT NULL,
	size    INTEGER NOT NULL,
	doc     TEXT    NOT NULL,
	PRIMARY KEY (org, module, model, id)
) STRICT;
CREATE INDEX db_documents_owner ON db_documents (org, module, model, owner, id);
CREATE TABLE db_terms (
	org    TEXT NOT NULL,
	module TEXT NOT NULL,
	model  TEXT NOT NULL,
	field  TEXT NOT NULL,
	value  ANY  NOT NULL,
	id     TEXT NOT NULL,
	PRIMARY KEY (org, module, model, field, value, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX db_terms_doc ON db_terms (org, module, model, id);
CREATE TABLE db_usage (
	org    TEXT    NOT NULL,
	module TEXT    NOT NULL,
	rows   INTEGER NOT NULL,
	bytes  INTEGER NOT NULL,
	PRIMARY KEY (org, module)
) STRICT, WITHOUT ROWID;
CREATE TABLE db_models (
	owner   TEXT    NOT NULL,
	module  TEXT    NOT NULL,
	model   TEXT    NOT NULL,
	schema  TEXT    NOT NULL,
	updated INTEGER NOT NULL,
	PRIMARY KEY (owner, module, model)
) STRICT, WITHOUT ROWID;
`,
	},
	{
		Name: "tasks",
		// Background tasks (store.TaskEnqueue) and the ticks schedules
		// fired (store.ScheduleFire). Times are unix nanoseconds, 0 for
		// none; roles is a JSON array; claim is the token of the attempt
		// in flight. An idempotency key is unique per organization and
		// module; the partial indexes serve the claim (due queued tasks,
		// lapsed leases), the queue bound (active tasks of a scope) and
		// the pruning of finished tasks.
		SQL: `
CREATE TABLE tasks (
	id             TEXT    NOT NULL PRIMARY KEY,
	org            TEXT    NOT NULL,
	module         TEXT    NOT NULL,
	action         TEXT    NOT NULL,
	input          BLOB    NOT NULL,
	user_id        TEXT    NOT NULL,
	roles          TEXT    NOT NULL DEFAULT '[]',
	correlation_id TEXT    NOT NULL DEFAULT '',
	key            TEXT    NOT NULL DEFAULT '',
	schedule       TEXT    NOT NULL DEFAULT '',
	state          TEXT    NOT NULL,
	attempts       INTEGER NOT NULL DEFAULT 0,
	max_attempts   INTEGER NOT NULL,
	run_at         INTEGER NOT NULL,
	lease_until    INTEGER NOT NULL DEFAULT 0,
	claim          TEXT    NOT NULL DEFAULT '',
	result         BLOB,
	error          TEXT    NOT NULL DEFAULT '',
	code           TEXT    NOT NULL DEFAULT '',
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL,
	finished_at    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE UNIQUE INDEX tasks_key ON tasks (org, module, key) WHERE key <> '';
CREATE INDEX tasks_due ON tasks (run_at) WHERE state = 'queued';
CREATE INDEX tasks_lease ON tasks (lease_until) WHERE state = 'running';
CREATE INDEX tasks_active ON tasks (org, module) WHERE state IN ('queued', 'running');
CREATE INDEX tasks_org_created ON tasks (org, created_at, id);
CREATE INDEX tasks_created ON tasks (created_at, id);
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at > 0;
CREATE TABLE schedule_ticks (
	org      TEXT    NOT NULL,
	module   TEXT    NOT NULL,
	schedule TEXT    NOT NULL,
	tick     INTEGER NOT NULL,
	task_id  TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (org, module, schedule, tick)
) STRICT, WITHOUT ROWID;
CREATE INDEX schedule_ticks_tick ON schedule_ticks (tick);
`,
	},
	{
		Name: "ai",
		// Model calls' daily token budgets (store/ai.go): ai_usage holds
		// a row per organization (module '') and per module per UTC day
		// (days since 1970-01-01): tokens settled, tokens held by calls
		// in flight, calls settled. ai_budgets holds an organization's
		// override of the operator's defaults (0: the default).
		// knowledge_vectors holds a knowledge document's embedding
		// (unit-length little-endian float32s) and the model that made
		// it; a document's delete takes its vector with it, and an add
		// replaces or removes it in the add's transaction.
		SQL: `
CREATE TABLE ai_usage (
	org      TEXT    NOT NULL,
	module   TEXT    NOT NULL,
	day      INTEGER NOT NULL,
	used     INTEGER NOT NULL DEFAULT 0,
	reserved INTEGER NOT NULL DEFAULT 0,
	calls    INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (org, day, module)
) STRICT, WITHOUT ROWID;
CREATE INDEX ai_usage_day ON ai_usage (day);
CREATE TABLE ai_budgets (
	org          TEXT    NOT NULL PRIMARY KEY,
	org_daily    INTEGER NOT NULL,
	module_daily INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL
) STRICT;
CREATE TABLE knowledge_vectors (
	doc   INTEGER NOT NULL PRIMARY KEY, -- knowledge_docs.doc
	model TEXT    NOT NULL,
	vec   BLOB    NOT NULL
) STRICT;
CREATE TRIGGER knowledge_vectors_delete AFTER DELETE ON knowledge_docs BEGIN
	DELETE FROM knowledge_vectors WHERE doc = OLD.doc;
END;
`,
	},
	{
		Name: "media",
		// Media items per organization (store.MediaPut): the row here,
		// the bytes in a file under media/ beside the database (media.go),
		// renamed into place inside the transaction that inserts the row.
		// media_usage is the organization's items and bytes, written in
		// the same transaction, for the quota. Times are unix nanoseconds.
		SQL: `
CREATE TABLE media_items (
	org        TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	type       TEXT    NOT NULL,
	size       INTEGER NOT NULL,
	width      INTEGER NOT NULL DEFAULT 0,
	height     INTEGER NOT NULL DEFAULT 0,
	module     TEXT    NOT NULL DEFAULT '',
	user_id    TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	PRIMARY KEY (org, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX media_items_created ON media_items (org, created_at, id);
CREATE INDEX media_items_module ON media_items (org, module, created_at, id);
CREATE TABLE media_usage (
	org   TEXT    NOT NULL PRIMARY KEY,
	items INTEGER NOT NULL,
	bytes INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`,
	},
	{
		Name: "secrets",
		// The operator's secrets (store.SecretPut), sealed by package
		// host/secrets: AES-256-GCM under the key key_id names, with the
		// org and name as additional data. org '' is the operator's own.
		// Times are unix nanoseconds.
		SQL: `
CREATE TABLE secrets (
	org        TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	ciphertext BLOB    NOT NULL,
	nonce      BLOB    NOT NULL,
	key_id     TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	created_by TEXT    NOT NULL DEFAULT '',
	updated_by TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (org, name)
) STRICT, WITHOUT ROWID;
`,
	},
	{
		Name: "tasks_origin",
		// Where a task runs (store.Task.Origin): '' for a module the
		// store holds, which any runner on the store may load; another
		// value for a module only one runner has (moat run's plugin from
		// its directory), whose tasks no server may claim. Additive: a
		// moat that predates it inserts and claims as before (an expand
		// step: MinReader 0).
		SQL: `
ALTER TABLE tasks ADD COLUMN origin TEXT NOT NULL DEFAULT '';
`,
	},
	{
		Name: "sessions",
		// moat serve's sessions across replicas (store.SessionImages,
		// store.ReplicaBeat, store.SessionRecord): paused sessions'
		// images, in chunks under a generation so that an upload is
		// short transactions and a reader holds one chunk; the uploads
		// under way (swept when a replica died mid-upload); the replicas
		// and where they are reached; which replica holds each session.
		// Additive: an older moat ignores the tables.
		SQL: `
CREATE TABLE session_images (
	org        TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	gen        TEXT    NOT NULL UNIQUE,
	size       INTEGER NOT NULL,
	chunk      INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (org, id)
) STRICT, WITHOUT ROWID;
CREATE TABLE session_image_chunks (
	gen  TEXT    NOT NULL,
	seq  INTEGER NOT NULL,
	data BLOB    NOT NULL,
	PRIMARY KEY (gen, seq)
) STRICT, WITHOUT ROWID;
CREATE TABLE session_image_uploads (
	gen        TEXT    NOT NULL PRIMARY KEY,
	org        TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	started_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE replicas (
	id         TEXT    NOT NULL PRIMARY KEY,
	url        TEXT    NOT NULL,
	mac        TEXT    NOT NULL,
	started_at INTEGER NOT NULL,
	seen_at    INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE session_directory (
	id         TEXT    NOT NULL PRIMARY KEY,
	org        TEXT    NOT NULL,
	user_id    TEXT    NOT NULL,
	replica    TEXT    NOT NULL,
	info       TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX session_directory_owner ON session_directory (org, user_id, created_at, id);
`,
	},
	{
		Name: "rate_buckets_full_at",
		// When each token bucket is full again (unix nanoseconds), so
		// store.RateSweep can delete the buckets that are full: a full
		// bucket and no bucket are the same to RateTake, and the table no
		// longer grows with every address a public route ever saw. Rows
		// from before get a day, longer than any refill moat sets. An
		// expand step: a moat that predates it inserts buckets with the
		// default, never swept, and leaves full_at as it was when it
		// takes, so a bucket only it used is kept as before (MinReader 0).
		SQL: `
ALTER TABLE rate_buckets ADD COLUMN full_at INTEGER NOT NULL DEFAULT 9223372036854775807;
UPDATE rate_buckets SET full_at = updated_at + 86400000000000;
`,
	},
	{
		Name: "api_keys_scopes",
		// What an API key may reach (scopes, a JSON array; '[]' for
		// everything its roles allow), when it expires (0: never), the
		// secret it had before its last rotation and until when that one
		// is still accepted, and its latest recorded use. Additive (an
		// expand step): a moat that predates it ignores the columns, so
		// it accepts scoped and expired keys as whole ones; create such
		// keys once every replica runs a moat that knows them.
		SQL: `
ALTER TABLE api_keys ADD COLUMN scopes TEXT NOT NULL DEFAULT '[]';
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN prev_until INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN last_used_addr TEXT NOT NULL DEFAULT '';
CREATE INDEX api_keys_prev_hash ON api_keys (prev_hash);
`,
	},
	{
		Name: "confirmation_approval",
		// Four-eyes approval: the roles the requester held when it asked
		// (a JSON array; an approved action runs with them, not with the
		// approver's), and who decided a used confirmation and how
		// ('confirmed' by its own token, 'approved' or 'denied' by an
		// approver; '' on rows from before). An expand step: a moat from
		// before ignores the columns and confirms by token as it did.
		SQL: `
ALTER TABLE confirmations ADD COLUMN roles TEXT NOT NULL DEFAULT '[]';
ALTER TABLE confirmations ADD COLUMN decided_by TEXT NOT NULL DEFAULT '';
ALTER TABLE confirmations ADD COLUMN decision TEXT NOT NULL DEFAULT '';
`,
	},
}

// migrate reads the schema's version of db and, as o and migrating
// (store.Migrate rather than Open) allow, applies the pending steps of
// all in one transaction. Because the writer pool begins transactions
// IMMEDIATE, two processes opening the same file at once apply each step
// exactly once. Before it changes a file that holds a schema already, it
// copies the file (VACUUM INTO, a consistent snapshot) to
// moat.db.before-v<version>-<time> beside it and logs where.
func migrate(ctx context.Context, db *sql.DB, all []driver.Migration, o driver.MigrateOptions, migrating bool) (r driver.MigrationReport, err error) {
	if !o.DryRun {
		var v int
		if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return r, fmt.Errorf("migrate: read schema version: %w", err)
		}
		known := len(all)
		if o.Known > 0 {
			known = min(known, o.Known)
		}
		if v > 0 && v < known && (migrating || o.Mode != driver.MigrateNever) {
			if r.Backup, err = backupBeforeMigrate(ctx, db, v); err != nil {
				return r, err
			}
			o.Logger().Info("store: copied the database before migrating it; restore it with moat restore or by putting the file back as moat.db", "backup", r.Backup, "schema", v)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return r, fmt.Errorf("migrate: begin: %w", err)
	}
	defer tx.Rollback()
	backup := r.Backup
	r, err = driver.Migrate(ctx, sqliteSchema{tx, all}, all, o, migrating, true)
	r.Backup = backup
	if err != nil {
		return r, fmt.Errorf("migrate: %w", err)
	}
	if !r.Applied {
		return r, nil
	}
	if err := tx.Commit(); err != nil {
		return r, fmt.Errorf("migrate: commit: %w", err)
	}
	return r, nil
}

// backupBeforeMigrate copies the database to a new file beside it.
func backupBeforeMigrate(ctx context.Context, db *sql.DB, version int) (string, error) {
	var file string
	if err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file); err != nil {
		return "", fmt.Errorf("migrate: find the database file to back up: %w", err)
	}
	dst := fmt.Sprintf("%s.before-v%d-%s", file, version, time.Now().UTC().Format("20060102T150405Z"))
	if err := VacuumInto(ctx, db, dst); err != nil {
		return "", fmt.Errorf("migrate: back the database up before migrating it (free disk space beside %s, or copy it away and remove it): %w", file, err)
	}
	return dst, nil
}

// VacuumInto writes a consistent copy of db's database to the new file
// dst (mode 0600): SQLite's VACUUM INTO reads one snapshot, so writes
// going on meanwhile are either in the copy whole or not at all.
func VacuumInto(ctx context.Context, db *sql.DB, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s exists already", dst)
	}
	// Create it first, private: VACUUM INTO fills an empty file.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", filepath.Clean(dst)); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

// sqliteSchema is driver.SchemaTx on SQLite: the version is PRAGMA
// user_version (what every moat reads), and schema_migrations records
// each step with its MinReader.
type sqliteSchema struct {
	tx  *sql.Tx
	all []driver.Migration
}

func (s sqliteSchema) State(ctx context.Context) (driver.SchemaState, error) {
	var st driver.SchemaState
	if err := s.tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&st.Version); err != nil {
		return st, err
	}
	if st.Version < 0 {
		return st, fmt.Errorf("schema version %d is negative; the file was not written by moat", st.Version)
	}
	var n int
	if err := s.tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil || n == 0 {
		// A file from before schema_migrations: its steps are this
		// moat's first ones, whose MinReader it knows. One past them
		// without a record cannot be told compatible.
		if st.Version > len(s.all) {
			st.MinReader = st.Version
			return st, err
		}
		for i := range st.Version {
			st.MinReader = max(st.MinReader, s.all[i].MinReader)
		}
		return st, err
	}
	var recorded int
	err := s.tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0), coalesce(max(min_reader), 0), coalesce((SELECT name FROM schema_migrations ORDER BY version DESC LIMIT 1), '') FROM schema_migrations`).Scan(&recorded, &st.MinReader, &st.Newest)
	if recorded < st.Version {
		// Steps past what is recorded cannot be told compatible.
		st.MinReader = max(st.MinReader, st.Version)
	}
	return st, err
}

func (s sqliteSchema) Apply(ctx context.Context, v int, m driver.Migration, minReader int, took func() time.Duration) error {
	var n int
	if err := s.tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		if _, err := s.tx.ExecContext(ctx, `
CREATE TABLE schema_migrations (
	version     INTEGER NOT NULL PRIMARY KEY,
	name        TEXT    NOT NULL,
	min_reader  INTEGER NOT NULL DEFAULT 0,
	applied_at  INTEGER NOT NULL, -- unix nanoseconds; 0: before this table
	duration_us INTEGER NOT NULL DEFAULT 0
) STRICT`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		// The steps applied before the table existed, as this moat
		// knows them.
		mr := 0
		for i := 1; i < v && i <= len(s.all); i++ {
			mr = max(mr, s.all[i-1].MinReader)
			if _, err := s.tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, min_reader, applied_at) VALUES (?, ?, ?, 0)`, i, s.all[i-1].Name, mr); err != nil {
				return fmt.Errorf("record step %d: %w", i, err)
			}
		}
	}
	if _, err := s.tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	if _, err := s.tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, min_reader, applied_at, duration_us) VALUES (?, ?, ?, ?, ?)`,
		v, m.Name, minReader, time.Now().UnixNano(), took().Microseconds()); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := s.tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
		return fmt.Errorf("write schema version: %w", err)
	}
	return nil
}
