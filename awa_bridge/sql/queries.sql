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

-- ---------------------------------------------------------------------------
-- Worker runtime. Every write about a held job matches (id, run_lease, state).
-- ---------------------------------------------------------------------------

-- name: claim_jobs
-- Candidates are picked in a CTE (an optimisation fence, so LIMIT holds under
-- concurrency) with SKIP LOCKED; the UPDATE re-checks state = 'available'.
-- A paused queue claims nothing. Each claim starts a new attempt with a
-- fresh run_lease (the fencing token) and its own deadline.
WITH candidates AS (
    SELECT id
    FROM awa.jobs
    WHERE state = 'available'
      AND queue = %(queue)s
      AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = %(queue)s AND m.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET state = 'running',
    attempt = j.attempt + 1,
    run_lease = j.run_lease + 1,
    attempted_at = now(),
    heartbeat_at = now(),
    deadline_at = now() + make_interval(secs => %(deadline_seconds)s)
FROM candidates
WHERE j.id = candidates.id AND j.state = 'available'
RETURNING j.id, j.kind, j.queue, j.args::text AS args, j.priority, j.attempt, j.max_attempts,
          j.run_lease, j.metadata::text AS metadata, j.tags, j.progress::text AS progress,
          j.run_at, j.created_at, j.deadline_at

-- name: complete_jobs
-- Batched completion; ids missing from the result were superseded (stale).
UPDATE awa.jobs AS j
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL
FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(leases)s AS bigint[])) AS d(id, lease)
WHERE j.id = d.id AND j.run_lease = d.lease AND j.state = 'running'
RETURNING j.id

-- name: complete_job_with_progress
UPDATE awa.jobs
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
    progress = COALESCE(CAST(%(progress)s AS jsonb), progress),
    metadata = metadata || CAST(%(metadata)s AS jsonb)
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id

-- name: finish_attempt
-- Any outcome other than plain completion: retryable, failed, cancelled or
-- snoozed (scheduled/available, attempt given back). Progress and metadata
-- written by the handler are kept across retries and snoozes.
UPDATE awa.jobs
SET state = CAST(%(state)s AS awa.job_state),
    run_at = COALESCE(CAST(%(run_at)s AS timestamptz), run_at),
    attempt = attempt - CAST(%(refund)s AS smallint),
    finalized_at = CASE WHEN CAST(%(state)s AS awa.job_state) IN ('failed', 'cancelled', 'completed')
                        THEN now() END,
    errors = CASE WHEN CAST(%(error)s AS jsonb) IS NULL THEN errors
                  ELSE array_append(errors, CAST(%(error)s AS jsonb)) END,
    progress = COALESCE(CAST(%(progress)s AS jsonb), progress),
    metadata = metadata || CAST(%(metadata)s AS jsonb),
    heartbeat_at = NULL,
    deadline_at = NULL
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id

-- name: heartbeat_jobs
UPDATE awa.jobs AS j
SET heartbeat_at = now()
FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(leases)s AS bigint[])) AS d(id, lease)
WHERE j.id = d.id AND j.run_lease = d.lease AND j.state = 'running'
RETURNING j.id

-- name: flush_progress
UPDATE awa.jobs
SET progress = COALESCE(CAST(%(progress)s AS jsonb), progress),
    metadata = metadata || CAST(%(metadata)s AS jsonb)
WHERE id = %(id)s AND run_lease = %(lease)s AND state = 'running'
RETURNING id

-- name: release_jobs
-- Shutdown: hand unfinished attempts back at once, without spending them.
UPDATE awa.jobs AS j
SET state = 'available', run_at = now(), attempt = j.attempt - 1,
    heartbeat_at = NULL, deadline_at = NULL
FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(leases)s AS bigint[])) AS d(id, lease)
WHERE j.id = d.id AND j.run_lease = d.lease AND j.state = 'running'
RETURNING j.id

-- ---------------------------------------------------------------------------
-- Maintenance (leader only). Candidates are locked with SKIP LOCKED and the
-- UPDATE re-checks state and lease, so a row being finalized concurrently is
-- skipped rather than overwritten (River #1302).
-- ---------------------------------------------------------------------------

-- name: try_leader_lock
SELECT pg_try_advisory_lock(7235104991187720552) AS acquired

-- name: promote_due
WITH due AS (
    SELECT id
    FROM awa.jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE awa.jobs AS j
    SET state = 'available'
    FROM due
    WHERE j.id = due.id AND j.state IN ('scheduled', 'retryable')
    RETURNING j.queue
)
SELECT queue, count(*) AS promoted, pg_notify('awa_jobs', queue) AS notified
FROM promoted
GROUP BY queue

-- name: rescue_stale_heartbeats
WITH stale AS (
    SELECT id, run_lease
    FROM awa.jobs
    WHERE state = 'running'
      AND heartbeat_at < now() - make_interval(secs => %(staleness_seconds)s)
    ORDER BY heartbeat_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
    run_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'error', format('heartbeat stale: no heartbeat for %%s s (attempt %%s); worker presumed dead',
                        %(staleness_seconds)s, j.attempt),
        'type', 'HeartbeatStale', 'attempt', j.attempt, 'at', now())),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM stale
WHERE j.id = stale.id AND j.run_lease = stale.run_lease AND j.state = 'running'
RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt

-- name: rescue_expired_deadlines
WITH expired AS (
    SELECT id, run_lease
    FROM awa.jobs
    WHERE state = 'running' AND deadline_at < now()
    ORDER BY deadline_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
    run_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'error', format('deadline exceeded (attempt %%s)', j.attempt),
        'type', 'DeadlineExceeded', 'attempt', j.attempt, 'at', now())),
    heartbeat_at = NULL,
    deadline_at = NULL
FROM expired
WHERE j.id = expired.id AND j.run_lease = expired.run_lease AND j.state = 'running'
RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt

-- name: delete_finished
-- Retention: delete a bounded batch of finished jobs older than their state's window.
DELETE FROM awa.jobs
WHERE id IN (
    SELECT id FROM awa.jobs
    WHERE (state = 'completed' AND finalized_at < now() - make_interval(secs => %(completed_seconds)s))
       OR (state IN ('failed', 'cancelled')
           AND finalized_at < now() - make_interval(secs => %(failed_seconds)s))
    LIMIT %(limit)s
)
RETURNING id

-- ---------------------------------------------------------------------------
-- Queues and inspection.
-- ---------------------------------------------------------------------------

-- name: pause_queue
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by)
VALUES (%(queue)s, true, now(), %(paused_by)s)
ON CONFLICT (queue) DO UPDATE SET paused = true, paused_at = now(), paused_by = EXCLUDED.paused_by
RETURNING queue

-- name: resume_queue
INSERT INTO awa.queue_meta (queue, paused) VALUES (%(queue)s, false)
ON CONFLICT (queue) DO UPDATE SET paused = false, paused_at = NULL, paused_by = NULL
RETURNING queue

-- name: get_job
SELECT id, kind, queue, args::text AS args, state::text AS state, priority, attempt,
       max_attempts, run_at, heartbeat_at, deadline_at, attempted_at, finalized_at,
       created_at, to_jsonb(errors)::text AS errors, metadata::text AS metadata, tags,
       unique_key, unique_states::text AS unique_states, callback_id::text AS callback_id,
       callback_timeout_at, callback_filter, callback_on_complete, callback_on_fail,
       callback_transform, run_lease, progress::text AS progress
FROM awa.jobs WHERE id = %(id)s

-- name: list_jobs
SELECT id, kind, queue, state::text AS state, priority, attempt, max_attempts, run_at, created_at
FROM awa.jobs
WHERE (CAST(%(queue)s AS text) IS NULL OR queue = %(queue)s)
  AND (CAST(%(state)s AS text) IS NULL OR state = CAST(%(state)s AS awa.job_state))
  AND (CAST(%(kind)s AS text) IS NULL OR kind = %(kind)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: queue_overview
-- Per queue: counts of the live states, and the lag of the oldest available job.
SELECT q.queue,
       count(*) FILTER (WHERE j.state = 'available') AS available,
       count(*) FILTER (WHERE j.state = 'running') AS running,
       count(*) FILTER (WHERE j.state = 'scheduled') AS scheduled,
       count(*) FILTER (WHERE j.state = 'retryable') AS retryable,
       count(*) FILTER (WHERE j.state = 'waiting_external') AS waiting_external,
       count(*) FILTER (WHERE j.state = 'failed') AS failed,
       EXTRACT(EPOCH FROM now() - min(j.run_at) FILTER (WHERE j.state = 'available')) AS lag_seconds,
       COALESCE(bool_or(m.paused), false) AS paused
FROM (SELECT DISTINCT queue FROM awa.jobs UNION SELECT queue FROM awa.queue_meta) AS q
LEFT JOIN awa.jobs AS j
       ON j.queue = q.queue AND j.state IN ('available', 'running', 'scheduled', 'retryable',
                                            'waiting_external', 'failed')
LEFT JOIN awa.queue_meta AS m ON m.queue = q.queue
GROUP BY q.queue
ORDER BY q.queue

-- ---------------------------------------------------------------------------
-- Periodic jobs (awa_bridge.cron, worker/maintenance/cron.py). last_enqueued_at
-- is the fire time of the last occurrence enqueued; only the leader's fire
-- transaction (or resume with skip_missed) moves it.
-- ---------------------------------------------------------------------------

-- name: upsert_cron_job
-- A declaration: insert, or replace the definition columns when one differs.
-- last_enqueued_at, paused_at/paused_by and created_at are never touched.
-- Returns a row only when something was inserted or changed.
INSERT INTO awa.cron_jobs AS c (name, cron_expr, timezone, kind, queue, args, priority, max_attempts,
                                tags, metadata, missed_fire_policy, created_at, updated_at)
VALUES (CAST(%(name)s AS text), CAST(%(cron_expr)s AS text), CAST(%(timezone)s AS text),
        CAST(%(kind)s AS text), CAST(%(queue)s AS text), CAST(%(args)s AS jsonb),
        CAST(%(priority)s AS smallint), CAST(%(max_attempts)s AS smallint), CAST(%(tags)s AS text[]),
        CAST(%(metadata)s AS jsonb), CAST(%(missed_fire_policy)s AS text),
        COALESCE(CAST(%(now)s AS timestamptz), now()), COALESCE(CAST(%(now)s AS timestamptz), now()))
ON CONFLICT (name) DO UPDATE
SET cron_expr = EXCLUDED.cron_expr, timezone = EXCLUDED.timezone, kind = EXCLUDED.kind,
    queue = EXCLUDED.queue, args = EXCLUDED.args, priority = EXCLUDED.priority,
    max_attempts = EXCLUDED.max_attempts, tags = EXCLUDED.tags, metadata = EXCLUDED.metadata,
    missed_fire_policy = EXCLUDED.missed_fire_policy, updated_at = EXCLUDED.updated_at
WHERE (c.cron_expr, c.timezone, c.kind, c.queue, c.args, c.priority, c.max_attempts, c.tags,
       c.metadata, c.missed_fire_policy)
      IS DISTINCT FROM
      (EXCLUDED.cron_expr, EXCLUDED.timezone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.args,
       EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.tags, EXCLUDED.metadata,
       EXCLUDED.missed_fire_policy)
RETURNING c.name

-- name: list_cron_jobs
SELECT name, cron_expr, timezone, kind, queue, args::text AS args, priority, max_attempts, tags,
       metadata::text AS metadata, missed_fire_policy, last_enqueued_at, created_at, updated_at,
       paused_at, paused_by, clock_timestamp() AS db_now
FROM awa.cron_jobs
ORDER BY name

-- name: get_cron_job
SELECT name, cron_expr, timezone, kind, queue, args::text AS args, priority, max_attempts, tags,
       metadata::text AS metadata, missed_fire_policy, last_enqueued_at, created_at, updated_at,
       paused_at, paused_by, clock_timestamp() AS db_now
FROM awa.cron_jobs
WHERE name = CAST(%(name)s AS text)

-- name: cron_fire_candidates
-- The leader's cheap unlocked look at what may be due; the database clock is
-- the reference for every worker.
SELECT name, cron_expr, timezone, missed_fire_policy, last_enqueued_at, created_at,
       clock_timestamp() AS db_now
FROM awa.cron_jobs
WHERE paused_at IS NULL
ORDER BY name

-- name: lock_cron_job_for_fire
-- Inside the fire transaction. SKIP LOCKED: a schedule another leader (or a
-- dying one) is firing right now is left to it.
SELECT name, cron_expr, timezone, kind, queue, args::text AS args, priority, max_attempts, tags,
       metadata::text AS metadata, missed_fire_policy, last_enqueued_at, created_at
FROM awa.cron_jobs
WHERE name = CAST(%(name)s AS text) AND paused_at IS NULL
FOR UPDATE SKIP LOCKED

-- name: advance_cron_job
-- Same transaction as the inserts; matches only if nobody moved it meanwhile.
UPDATE awa.cron_jobs
SET last_enqueued_at = CAST(%(fire_at)s AS timestamptz)
WHERE name = CAST(%(name)s AS text)
  AND paused_at IS NULL
  AND last_enqueued_at IS NOT DISTINCT FROM CAST(%(previous)s AS timestamptz)
RETURNING name

-- name: pause_cron_job
-- Pausing a paused schedule keeps the first pause's time and author.
UPDATE awa.cron_jobs
SET paused_by = CASE WHEN paused_at IS NULL THEN CAST(%(paused_by)s AS text) ELSE paused_by END,
    updated_at = CASE WHEN paused_at IS NULL THEN now() ELSE updated_at END,
    paused_at = COALESCE(paused_at, now())
WHERE name = CAST(%(name)s AS text)
RETURNING name

-- name: lock_cron_job_for_resume
SELECT name, cron_expr, timezone, last_enqueued_at, paused_at, clock_timestamp() AS db_now
FROM awa.cron_jobs
WHERE name = CAST(%(name)s AS text)
FOR UPDATE

-- name: resume_cron_job
-- skip_to (resume with skip_missed) moves last_enqueued_at forward, never back.
UPDATE awa.cron_jobs
SET updated_at = CASE WHEN paused_at IS NULL THEN updated_at ELSE now() END,
    paused_at = NULL,
    paused_by = NULL,
    last_enqueued_at = GREATEST(last_enqueued_at, CAST(%(skip_to)s AS timestamptz))
WHERE name = CAST(%(name)s AS text)
RETURNING name

-- name: delete_cron_job
DELETE FROM awa.cron_jobs WHERE name = CAST(%(name)s AS text) RETURNING name
