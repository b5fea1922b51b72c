package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// migrations are the steps of the schema, applied in order and recorded in
// schema_migrations. Append new migrations; never edit or reorder one
// that has shipped. The schema is SQLite's (store/sqlite), column for
// column, in PostgreSQL's types: bytea for bytes, bigint for unix
// nanoseconds, and kv keys as bytea, because KVList's range bounds are
// byte strings that need not be valid UTF-8 (a prefix can end inside a
// character), which text refuses, and bytea compares bytewise like
// SQLite's BINARY collation.
//
// Each step is a driver.Migration: read its doc for expand and contract
// steps (MinReader). Adding a step is one new entry at the end.
var migrations = []driver.Migration{
	{Name: "kv", SQL: `
CREATE TABLE kv (
	org        text   NOT NULL,
	module     text   NOT NULL,
	key        bytea  NOT NULL,
	value      bytea  NOT NULL,
	updated_at bigint NOT NULL, -- unix milliseconds
	PRIMARY KEY (org, module, key)
);
-- The bytes each (org, module) stores in kv, kept by triggers in the
-- transaction of every write; every kv write locks its scope's row first
-- (see kvLock), which makes the quota check atomic across replicas.
CREATE TABLE kv_usage (
	org    text   NOT NULL,
	module text   NOT NULL,
	bytes  bigint NOT NULL,
	PRIMARY KEY (org, module)
);
CREATE FUNCTION moat_kv_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		UPDATE kv_usage SET bytes = bytes - (octet_length(OLD.key) + octet_length(OLD.value))
			WHERE org = OLD.org AND module = OLD.module;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO kv_usage (org, module, bytes)
		VALUES (NEW.org, NEW.module, octet_length(NEW.key) + octet_length(NEW.value))
		ON CONFLICT (org, module) DO UPDATE SET bytes = kv_usage.bytes + excluded.bytes;
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER kv_usage AFTER INSERT OR UPDATE OR DELETE ON kv FOR EACH ROW EXECUTE FUNCTION moat_kv_usage();
`},
	{Name: "audit_events", SQL: `
CREATE TABLE audit_events (
	id             text   NOT NULL PRIMARY KEY,
	time           bigint NOT NULL,
	kind           text   NOT NULL,
	decision       text   NOT NULL DEFAULT '',
	correlation_id text   NOT NULL DEFAULT '',
	module         text   NOT NULL DEFAULT '',
	action         text   NOT NULL DEFAULT '',
	op             text   NOT NULL DEFAULT '',
	user_id        text   NOT NULL DEFAULT '',
	org            text   NOT NULL DEFAULT '',
	rule           text   NOT NULL DEFAULT '',
	reason         text   NOT NULL DEFAULT '',
	code           text   NOT NULL DEFAULT '',
	mutation_id    text   NOT NULL DEFAULT '',
	task_id        text   NOT NULL DEFAULT '',
	model_call_id  text   NOT NULL DEFAULT '',
	duration_ns    bigint NOT NULL DEFAULT 0,
	attrs          text
);
CREATE INDEX audit_events_correlation_id ON audit_events (correlation_id);
CREATE INDEX audit_events_module_time ON audit_events (module, time);
CREATE INDEX audit_events_decision_time ON audit_events (decision, time);
CREATE INDEX audit_events_org_time ON audit_events (org, time);
CREATE INDEX audit_events_time ON audit_events (time);
`},
	{Name: "confirmations", SQL: `
CREATE TABLE confirmations (
	token_hash   text   NOT NULL PRIMARY KEY,
	org          text   NOT NULL,
	user_id      text   NOT NULL,
	module       text   NOT NULL,
	action       text   NOT NULL,
	input        bytea  NOT NULL,
	input_sha256 text   NOT NULL,
	summary      text   NOT NULL,
	created_at   bigint NOT NULL,
	expires_at   bigint NOT NULL,
	used_at      bigint,
	binding      text   NOT NULL DEFAULT ''
);
CREATE INDEX confirmations_pending ON confirmations (org, created_at) WHERE used_at IS NULL;
CREATE INDEX confirmations_expires_at ON confirmations (expires_at);
CREATE INDEX confirmations_used_at ON confirmations (used_at) WHERE used_at IS NOT NULL;
`},
	{Name: "api_keys", SQL: `
CREATE TABLE api_keys (
	id         text   NOT NULL PRIMARY KEY,
	hash       text   NOT NULL UNIQUE,
	org        text   NOT NULL,
	user_id    text   NOT NULL,
	roles      text   NOT NULL DEFAULT '[]',
	name       text   NOT NULL DEFAULT '',
	created_at bigint NOT NULL,
	revoked_at bigint
);
CREATE INDEX api_keys_org ON api_keys (org, created_at);
`},
	{Name: "modules", SQL: `
CREATE TABLE module_versions (
	org         text   NOT NULL,
	name        text   NOT NULL,
	digest      text   NOT NULL,
	version     text   NOT NULL DEFAULT '',
	size        bigint NOT NULL,
	manifest    bytea,
	signature   bytea,
	uploaded_by text   NOT NULL DEFAULT '',
	uploaded_at bigint NOT NULL,
	PRIMARY KEY (org, name, digest)
);
CREATE TABLE modules (
	org        text   NOT NULL,
	name       text   NOT NULL,
	digest     text   NOT NULL,
	updated_at bigint NOT NULL,
	PRIMARY KEY (org, name),
	FOREIGN KEY (org, name, digest) REFERENCES module_versions (org, name, digest)
);
CREATE INDEX module_versions_digest ON module_versions (digest);
CREATE INDEX module_versions_org_time ON module_versions (org, uploaded_at);
CREATE TABLE module_blobs (
	digest     text   NOT NULL PRIMARY KEY,
	data       bytea  NOT NULL,
	written_at bigint NOT NULL
);
-- The change log behind store.WatchModules, written by a trigger on
-- modules in the transaction of the write, which also NOTIFYs watchers
-- (delivered at commit). Every module write holds moduleLock, so seq
-- order is commit order and a reader never skips a late commit.
CREATE TABLE module_changes (
	seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	org    text   NOT NULL,
	name   text   NOT NULL,
	digest text   NOT NULL,
	at     bigint NOT NULL
);
CREATE FUNCTION moat_module_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE s bigint;
BEGIN
	IF TG_OP = 'DELETE' THEN
		INSERT INTO module_changes (org, name, digest, at) VALUES (OLD.org, OLD.name, '', OLD.updated_at) RETURNING seq INTO s;
	ELSE
		INSERT INTO module_changes (org, name, digest, at) VALUES (NEW.org, NEW.name, NEW.digest, NEW.updated_at) RETURNING seq INTO s;
	END IF;
	DELETE FROM module_changes WHERE seq <= s - 10000;
	PERFORM pg_notify('moat_modules', s::text);
	RETURN NULL;
END $$;
CREATE TRIGGER module_changes AFTER INSERT OR UPDATE OR DELETE ON modules FOR EACH ROW EXECUTE FUNCTION moat_module_change();
`},
	{Name: "rate_buckets", SQL: `
CREATE TABLE rate_buckets (
	key        text             NOT NULL PRIMARY KEY,
	tokens     double precision NOT NULL,
	updated_at bigint           NOT NULL,
	taken      boolean          NOT NULL
);
`},
	// Routine audit events packed by the store's front; see SQLite's
	// migration of the same name.
	{Name: "audit_segments", SQL: `
CREATE TABLE audit_segments (
	id       bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	org      text    NOT NULL,
	time_min bigint  NOT NULL,
	time_max bigint  NOT NULL,
	count    integer NOT NULL,
	bloom    bytea   NOT NULL,
	data     bytea   NOT NULL
);
CREATE INDEX audit_segments_org_time ON audit_segments (org, time_max, id);
CREATE INDEX audit_segments_time ON audit_segments (time_max, id);
`},
	// Compiled machine code hosts share; see SQLite's migration of the
	// same name. data is stored out of line without compression
	// (STORAGE EXTERNAL): an artifact is written once and read by every
	// replica at every load, and pglz would cost each read its
	// decompression (and the write its compression) to save disk the
	// eviction budget bounds anyway.
	{Name: "code_artifacts", SQL: `
CREATE TABLE code_artifacts (
	key       text   NOT NULL PRIMARY KEY,
	mac       bytea  NOT NULL,
	stored_at bigint NOT NULL,
	used_at   bigint NOT NULL,
	data      bytea  NOT NULL
);
ALTER TABLE code_artifacts ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX code_artifacts_used_at ON code_artifacts (used_at);
`},
	// Knowledge documents (store.KnowledgeAdd). tsv is to_tsvector
	// ('simple', ...) of the terms the front made of the text (never the
	// text itself), so the parser only ever sees words of a-z 0-9 and
	// the dictionary changes nothing. ts_rank reads no other document, so
	// nothing of another organization enters a score. id sorts bytewise
	// (COLLATE "C"), as on SQLite. The GIN index is written through
	// (fastupdate off): its pending list would be read by every search,
	// of every organization, until a vacuum, so one organization's recent
	// writes would slow another's searches, and the planner shunned the
	// index for it (a rare word: 9 ms by the primary key, 0.1 ms by the
	// index once written through). Every write locks its module's
	// knowledge_usage row first (knowledgeLock), which makes the quota
	// check atomic across replicas; the trigger keeps the row.
	{Name: "knowledge", SQL: `
CREATE TABLE knowledge_docs (
	org        text     NOT NULL,
	module     text     NOT NULL,
	collection text     NOT NULL,
	id         text     NOT NULL COLLATE "C",
	owner      text     NOT NULL,
	text       text     NOT NULL,
	meta       jsonb    NOT NULL,
	tsv        tsvector NOT NULL,
	bytes      bigint   NOT NULL,
	updated_at bigint   NOT NULL,
	PRIMARY KEY (org, module, collection, id)
);
CREATE INDEX knowledge_docs_tsv ON knowledge_docs USING gin (tsv) WITH (fastupdate = off);
CREATE TABLE knowledge_usage (
	org    text   NOT NULL,
	module text   NOT NULL,
	docs   bigint NOT NULL,
	bytes  bigint NOT NULL,
	PRIMARY KEY (org, module)
);
CREATE FUNCTION moat_knowledge_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		UPDATE knowledge_usage SET docs = docs - 1, bytes = bytes - OLD.bytes
			WHERE org = OLD.org AND module = OLD.module;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO knowledge_usage (org, module, docs, bytes) VALUES (NEW.org, NEW.module, 1, NEW.bytes)
		ON CONFLICT (org, module) DO UPDATE SET docs = knowledge_usage.docs + 1, bytes = knowledge_usage.bytes + excluded.bytes;
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER knowledge_usage AFTER INSERT OR UPDATE OR DELETE ON knowledge_docs FOR EACH ROW EXECUTE FUNCTION moat_knowledge_usage();
`},
	// The db family; see SQLite's migration of the same name. doc is
	// json, not jsonb: json keeps the front's canonical text byte for
	// byte (jsonb would rewrite it: spaces, key order, and numbers
	// written out in full, 1e300 as 301 digits), and the indexes cast
	// what they compare to jsonb. ids compare bytewise (COLLATE "C").
	// An array field's index is a GIN index on its jsonb, so there is
	// no terms table here.
	{Name: "db_documents", SQL: `
CREATE TABLE db_documents (
	org     text   NOT NULL,
	module  text   NOT NULL,
	model   text   NOT NULL,
	id      text   COLLATE "C" NOT NULL,
	owner   text   NOT NULL,
	version bigint NOT NULL,
	created bigint NOT NULL,
	updated bigint NOT NULL,
	size    bigint NOT NULL,
	doc     json   NOT NULL,
	PRIMARY KEY (org, module, model, id)
);
CREATE INDEX db_documents_owner ON db_documents (org, module, model, owner, id);
CREATE TABLE db_usage (
	org    text   NOT NULL,
	module text   NOT NULL,
	rows   bigint NOT NULL,
	bytes  bigint NOT NULL,
	PRIMARY KEY (org, module)
);
CREATE TABLE db_models (
	owner   text   NOT NULL,
	module  text   NOT NULL,
	model   text   NOT NULL,
	schema  text   NOT NULL,
	updated bigint NOT NULL,
	PRIMARY KEY (owner, module, model)
);
`},
	{Name: "tasks", SQL: `
CREATE TABLE tasks (
	id             text    NOT NULL PRIMARY KEY,
	org            text    NOT NULL,
	module         text    NOT NULL,
	action         text    NOT NULL,
	input          bytea   NOT NULL,
	user_id        text    NOT NULL,
	roles          text    NOT NULL DEFAULT '[]',
	correlation_id text    NOT NULL DEFAULT '',
	key            text    NOT NULL DEFAULT '',
	schedule       text    NOT NULL DEFAULT '',
	state          text    NOT NULL,
	attempts       integer NOT NULL DEFAULT 0,
	max_attempts   integer NOT NULL,
	run_at         bigint  NOT NULL,
	lease_until    bigint  NOT NULL DEFAULT 0,
	claim          text    NOT NULL DEFAULT '',
	result         bytea,
	error          text    NOT NULL DEFAULT '',
	code           text    NOT NULL DEFAULT '',
	created_at     bigint  NOT NULL,
	updated_at     bigint  NOT NULL,
	finished_at    bigint  NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX tasks_key ON tasks (org, module, key) WHERE key <> '';
CREATE INDEX tasks_due ON tasks (run_at) WHERE state = 'queued';
CREATE INDEX tasks_lease ON tasks (lease_until) WHERE state = 'running';
CREATE INDEX tasks_active ON tasks (org, module) WHERE state IN ('queued', 'running');
CREATE INDEX tasks_org_created ON tasks (org, created_at, id);
CREATE INDEX tasks_created ON tasks (created_at, id);
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at > 0;
CREATE TABLE schedule_ticks (
	org      text   NOT NULL,
	module   text   NOT NULL,
	schedule text   NOT NULL,
	tick     bigint NOT NULL,
	task_id  text   NOT NULL DEFAULT '',
	PRIMARY KEY (org, module, schedule, tick)
);
CREATE INDEX schedule_ticks_tick ON schedule_ticks (tick);
`},
	// Model calls' daily token budgets and knowledge vectors; see
	// SQLite's migration of the same name. A reservation updates its
	// rows with a condition (used + reserved + n <= limit) that
	// PostgreSQL evaluates again on the row's latest version once the
	// row lock is granted, so concurrent reservations on replicas never
	// both take the last tokens. A vector goes with its document by the
	// foreign key.
	{Name: "ai", SQL: `
CREATE TABLE ai_usage (
	org      text   NOT NULL,
	module   text   NOT NULL,
	day      bigint NOT NULL,
	used     bigint NOT NULL DEFAULT 0,
	reserved bigint NOT NULL DEFAULT 0,
	calls    bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (org, day, module)
);
CREATE INDEX ai_usage_day ON ai_usage (day);
CREATE TABLE ai_budgets (
	org          text   NOT NULL PRIMARY KEY,
	org_daily    bigint NOT NULL,
	module_daily bigint NOT NULL,
	updated_at   bigint NOT NULL
);
CREATE TABLE knowledge_vectors (
	org        text  NOT NULL,
	module     text  NOT NULL,
	collection text  NOT NULL,
	id         text  NOT NULL COLLATE "C",
	model      text  NOT NULL,
	vec        bytea NOT NULL,
	PRIMARY KEY (org, module, collection, id),
	FOREIGN KEY (org, module, collection, id) REFERENCES knowledge_docs ON DELETE CASCADE
);
`},
	{Name: "media", SQL: `
-- Media items per organization (store.MediaPut), and their bytes in
-- chunks of media.go's mediaChunk bytes, so that replicas share them
-- with no shared disk and a Range request reads the chunks it covers.
-- The chunks are stored EXTERNAL: TOASTed out of line, never compressed
-- (media is compressed already; pglz would spend CPU to gain nothing).
-- media_usage is each organization's items and bytes; every write locks
-- its row first, which makes the quota atomic across replicas.
CREATE TABLE media_items (
	org        text    NOT NULL,
	id         text    NOT NULL,
	type       text    NOT NULL,
	size       bigint  NOT NULL,
	width      integer NOT NULL DEFAULT 0,
	height     integer NOT NULL DEFAULT 0,
	module     text    NOT NULL DEFAULT '',
	user_id    text    NOT NULL DEFAULT '',
	created_at bigint  NOT NULL,
	chunk      integer NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE INDEX media_items_created ON media_items (org, created_at, id);
CREATE INDEX media_items_module ON media_items (org, module, created_at, id);
CREATE TABLE media_chunks (
	org  text    NOT NULL,
	id   text    NOT NULL,
	seq  integer NOT NULL,
	data bytea   NOT NULL,
	PRIMARY KEY (org, id, seq)
);
ALTER TABLE media_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE media_usage (
	org   text   NOT NULL PRIMARY KEY,
	items bigint NOT NULL,
	bytes bigint NOT NULL
);
`},
	{Name: "secrets", SQL: `
-- The operator's secrets (store.SecretPut), sealed by package host/secrets;
-- org '' is the operator's own.
CREATE TABLE secrets (
	org        text   NOT NULL,
	name       text   NOT NULL,
	ciphertext bytea  NOT NULL,
	nonce      bytea  NOT NULL,
	key_id     text   NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL,
	created_by text   NOT NULL DEFAULT '',
	updated_by text   NOT NULL DEFAULT '',
	PRIMARY KEY (org, name)
);
`},
	{Name: "tasks_origin", SQL: `
-- Where a task runs (store.Task.Origin): '' for a module the store holds,
-- which any replica may load; another value for a module only one runner
-- has (moat run's plugin from its directory), which no replica claims.
-- An expand step: a moat that predates it inserts and claims as before.
ALTER TABLE tasks ADD COLUMN origin text NOT NULL DEFAULT '';
`},
	{Name: "sessions", SQL: `
-- moat serve's sessions across replicas: paused sessions' images in
-- chunks under a generation (an upload is short transactions; a reader
-- holds one chunk; EXTERNAL: an image is mostly incompressible memory
-- pages and pglz would spend CPU on it), the uploads under way, the
-- replicas and where they are reached, which replica holds each session.
CREATE TABLE session_images (
	org        text    NOT NULL,
	id         text    NOT NULL,
	gen        text    NOT NULL UNIQUE,
	size       bigint  NOT NULL,
	chunk      integer NOT NULL,
	created_at bigint  NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE TABLE session_image_chunks (
	gen  text    NOT NULL,
	seq  integer NOT NULL,
	data bytea   NOT NULL,
	PRIMARY KEY (gen, seq)
);
ALTER TABLE session_image_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE TABLE session_image_uploads (
	gen        text   NOT NULL PRIMARY KEY,
	org        text   NOT NULL,
	id         text   NOT NULL,
	started_at bigint NOT NULL
);
CREATE TABLE replicas (
	id         text   NOT NULL PRIMARY KEY,
	url        text   NOT NULL,
	mac        text   NOT NULL,
	started_at bigint NOT NULL,
	seen_at    bigint NOT NULL
);
CREATE TABLE session_directory (
	id         text   NOT NULL PRIMARY KEY,
	org        text   NOT NULL,
	user_id    text   NOT NULL,
	replica    text   NOT NULL,
	info       text   NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL
);
CREATE INDEX session_directory_owner ON session_directory (org, user_id, created_at, id);
`},
	{Name: "rate_buckets_full_at", SQL: `
-- When each token bucket is full again (unix nanoseconds), so
-- store.RateSweep deletes the full ones (a full bucket and no bucket are
-- the same to RateTake). Rows from before get a day. An expand step: an
-- older moat inserts with the default (never swept) and leaves full_at
-- as it was when it takes.
ALTER TABLE rate_buckets ADD COLUMN full_at bigint NOT NULL DEFAULT 9223372036854775807;
UPDATE rate_buckets SET full_at = updated_at + 86400000000000;
`},
	{Name: "api_keys_scopes", SQL: `
-- What an API key may reach, when it expires, the secret it had before
-- its last rotation and until when, its latest recorded use (see the
-- SQLite step of the same name). An expand step.
ALTER TABLE api_keys ADD COLUMN scopes text NOT NULL DEFAULT '[]';
ALTER TABLE api_keys ADD COLUMN expires_at bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN prev_hash text NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN prev_until bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN last_used_at bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN last_used_addr text NOT NULL DEFAULT '';
CREATE INDEX api_keys_prev_hash ON api_keys (prev_hash);
`},
	{Name: "confirmation_approval", SQL: `
-- Four-eyes approval: the requester's roles at request time, who decided
-- a used confirmation and how (see the SQLite step of the same name). An
-- expand step.
ALTER TABLE confirmations ADD COLUMN roles text NOT NULL DEFAULT '[]';
ALTER TABLE confirmations ADD COLUMN decided_by text NOT NULL DEFAULT '';
ALTER TABLE confirmations ADD COLUMN decision text NOT NULL DEFAULT '';
`},
}

// migrateLock is the advisory lock that serializes migrations of replicas
// starting at once, and of `moat migrate` run twice ('moat' 'mig' in
// ASCII).
const migrateLock = 0x6d6f6174_6d6967

// migrate reads the schema's version under migrateLock and, as o and
// migrating (store.Migrate rather than Open) allow, applies the pending
// steps of all in one transaction: replicas starting together, or two
// `moat migrate`, apply each step once; the second waits for the lock and
// then finds nothing to do. A database a newer moat contracted is
// refused, and so is an older schema unless o says to migrate at open
// (driver.Plan).
func migrate(ctx context.Context, pool *pgxpool.Pool, all []driver.Migration, o driver.MigrateOptions, migrating bool) (driver.MigrationReport, error) {
	var r driver.MigrationReport
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, int64(migrateLock)).Scan(&got); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if !got {
			o.Logger().Info("store: waiting for another moat that is migrating this database (advisory lock)")
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
				return fmt.Errorf("migrate: lock: %w", err)
			}
		}
		var err error
		r, err = driver.Migrate(ctx, pgSchema{tx}, all, o, migrating, false)
		return err
	})
	return r, err
}

// pgSchema is driver.SchemaTx on PostgreSQL: the version is the largest in
// schema_migrations, which also records each step's MinReader.
type pgSchema struct{ tx pgx.Tx }

func (s pgSchema) State(ctx context.Context) (driver.SchemaState, error) {
	var st driver.SchemaState
	var exists bool
	if err := s.tx.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return st, err
	}
	// min_reader is read through to_jsonb so that the table of a moat
	// from before the column (which an older moat made) reads as 0.
	err := s.tx.QueryRow(ctx, `
SELECT coalesce(max(version), 0),
       coalesce(max((to_jsonb(m)->>'min_reader')::integer), 0),
       coalesce((SELECT name FROM schema_migrations ORDER BY version DESC LIMIT 1), '')
FROM schema_migrations m`).Scan(&st.Version, &st.MinReader, &st.Newest)
	return st, err
}

func (s pgSchema) Apply(ctx context.Context, v int, m driver.Migration, minReader int, took func() time.Duration) error {
	if _, err := s.tx.Exec(ctx, `
CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer NOT NULL PRIMARY KEY,
	name       text    NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE schema_migrations
	ADD COLUMN IF NOT EXISTS min_reader  integer NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS duration_us bigint  NOT NULL DEFAULT 0`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	if _, err := s.tx.Exec(ctx, m.SQL); err != nil {
		return err
	}
	if _, err := s.tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, min_reader, duration_us) VALUES ($1, $2, $3, $4)`,
		v, m.Name, minReader, took().Microseconds()); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}
