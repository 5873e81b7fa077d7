-- Every runtime statement of awa_bridge, one named block each.
-- Parameters use one canonical style, %(name)s; awa_bridge.sql compiles each
-- block for asyncpg ($n), psycopg / Django (pyformat) and SQLAlchemy (:name).
-- Never write a cast right after a parameter (%(x)s::type): use CAST(... AS ...).

-- name: insert_job
-- Single transactional insert through the public contract function, so it
-- works on our schema and on one migrated by the real Awa.
SELECT id, kind, queue, args::text AS args, state::text AS state, priority, attempt,
       max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
       created_at, to_jsonb(errors)::text AS errors, metadata::text AS metadata, tags,
       unique_key, unique_states::text AS unique_states, callback_id::text AS callback_id,
       callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
       callback_transform, run_lease, progress::text AS progress
FROM awa.insert_job_compat(
    CAST(%(kind)s AS text),
    CAST(%(queue)s AS text),
    CAST(%(args)s AS jsonb),
    CAST(%(state)s AS awa.job_state),
    CAST(%(priority)s AS smallint),
    CAST(%(max_attempts)s AS smallint),
    CAST(%(run_at)s AS timestamptz),
    CAST(%(metadata)s AS jsonb),
    CAST(%(tags)s AS text[]),
    CAST(%(unique_key)s AS bytea),
    CAST(CAST(%(unique_states)s AS text) AS bit(8)),
    CAST(%(ordering_key)s AS bytea)
)

-- name: create_insert_stage
-- Bulk inserts COPY into this per-session staging table first when some rows
-- carry unique keys, so duplicates can be skipped with ON CONFLICT.
CREATE TEMP TABLE IF NOT EXISTS awa_insert_stage (
    kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    max_attempts smallint, run_at timestamptz, metadata jsonb, tags text[],
    unique_key bytea, unique_states text
)

-- name: clear_insert_stage
DELETE FROM awa_insert_stage

-- name: insert_from_stage
WITH inserted AS (
    INSERT INTO awa.jobs (kind, queue, args, state, priority, max_attempts, run_at,
                          metadata, tags, unique_key, unique_states)
    SELECT kind, queue, args, state, priority, max_attempts, run_at,
           metadata, tags, unique_key, CAST(unique_states AS bit(8))
    FROM awa_insert_stage
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT count(*) AS inserted FROM inserted

-- name: migration_lock
-- Serialises concurrent migration runs; released at transaction end.
SELECT pg_advisory_xact_lock(7235104991187720551)

-- name: awa_schema_version_rows
-- Rows of the real Awa's own ledger; present only on a database it migrated.
SELECT count(*) AS n FROM awa.schema_version

-- name: relation_exists
SELECT to_regclass(%(name)s) IS NOT NULL AS present

-- name: create_migration_ledger
CREATE SCHEMA IF NOT EXISTS awa;
CREATE TABLE IF NOT EXISTS awa.bridge_migrations (
    name       text        PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: applied_migrations
SELECT name, checksum FROM awa.bridge_migrations ORDER BY name

-- name: record_migration
INSERT INTO awa.bridge_migrations (name, checksum) VALUES (%(name)s, %(checksum)s)
