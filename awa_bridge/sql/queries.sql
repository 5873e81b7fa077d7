-- Every runtime statement of awa_bridge, one named block each.
-- Parameters use one canonical style, %(name)s; awa_bridge.sql compiles each
-- block for asyncpg ($n), psycopg / Django (pyformat) and SQLAlchemy (:name).
-- Never write a cast right after a parameter (%(x)s::type): use CAST(... AS ...).
-- SQL that several statements share is a "-- fragment: NAME" block, written
-- before its first use and included as /* include: NAME */ (expanded when the
-- file is loaded). Scenario ids such as R30 refer to docs/reliability.md.

-- name: insert_job
-- Single transactional insert: one row of awa.jobs, on the caller's
-- connection. A plain INSERT works on both schemas DESIGN.md section 3 names:
-- on ours awa.jobs is the table; on a database the real Awa (awa-pg 0.6.9)
-- migrated it is a view whose INSTEAD OF INSERT trigger (awa.write_jobs_view)
-- stores the row in awa-pg's own tables, through awa.insert_job_compat when
-- its queue storage is active (tests/test_interop_awa.py runs both). On ours
-- it is the function's own INSERT without the plpgsql call around it, about
-- 10% of the server's instructions per enqueue (docs/adr/004). Only what the
-- database decides comes back; the rest of the row is what the caller sent.
-- Only created_at comes back of the two times: run_at is the caller's, or
-- now() (which created_at also is) when the caller gave none. The column
-- itself, not an expression of it: Django sends every statement as text,
-- parsed and planned anew each call, where an EXTRACT into integers cost the
-- server a fifth more than the bare INSERT (2026-12-06, docs/adr/004).
-- enqueue.py makes both times UTC whatever the driver's time zone.
INSERT INTO awa.jobs (kind, queue, args, state, priority, max_attempts, run_at,
                      metadata, tags, unique_key, unique_states)
VALUES (CAST(%(kind)s AS text), CAST(%(queue)s AS text), CAST(%(args)s AS jsonb),
        CAST(%(state)s AS awa.job_state), CAST(%(priority)s AS smallint),
        CAST(%(max_attempts)s AS smallint), COALESCE(CAST(%(run_at)s AS timestamptz), now()),
        CAST(%(metadata)s AS jsonb), CAST(%(tags)s AS text[]), CAST(%(unique_key)s AS bytea),
        CAST(CAST(%(unique_states)s AS text) AS bit(8)))
RETURNING id, created_at

-- name: insert_plain_job
-- insert_job for the common job: available now, at the default priority and
-- max_attempts, with no metadata, tags or unique key; the other columns take
-- the table's (or awa-pg's view trigger's) defaults. Three parameters instead
-- of eleven for the driver to encode and for the server to cast. Returns
-- what insert_job returns.
INSERT INTO awa.jobs (kind, queue, args)
VALUES (CAST(%(kind)s AS text), CAST(%(queue)s AS text), CAST(%(args)s AS jsonb))
RETURNING id, created_at

-- name: insert_ordered_job
-- insert_job for a job with an ordering key, which awa.jobs has no column
-- for: through the contract's function, which keeps it beside the job (ours:
-- awa.job_ordering_keys; awa-pg: its own storage). The function is called in
-- a select list, not in FROM, where PostgreSQL runs it as a function scan
-- (its one row stored in a tuplestore and read back): about 25,000 fewer
-- server instructions a call. OFFSET 0 keeps the subquery from being pulled
-- up, which would call the function once per column. Returns run_at besides
-- what insert_job returns: awa-pg's function stamps it with its own clock.
SELECT (j).id, (j).run_at, (j).created_at FROM (SELECT awa.insert_job_compat(
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
) AS j OFFSET 0) AS inserted

-- name: create_insert_stage
-- Bulk inserts COPY into this per-session staging table first when some rows
-- carry unique keys, so duplicates can be skipped with ON CONFLICT. Every
-- statement names it pg_temp.awa_insert_stage: unqualified, a search_path
-- that lists pg_temp after a schema holding a table of the same name would
-- send the rows (and the DELETE) there.
CREATE TEMP TABLE IF NOT EXISTS awa_insert_stage (
    kind text, queue text, args jsonb, state awa.job_state, priority smallint,
    max_attempts smallint, run_at timestamptz, metadata jsonb, tags text[],
    unique_key bytea, unique_states text
)

-- name: clear_insert_stage
DELETE FROM pg_temp.awa_insert_stage

-- name: insert_from_stage
WITH inserted AS (
    INSERT INTO awa.jobs (kind, queue, args, state, priority, max_attempts, run_at,
                          metadata, tags, unique_key, unique_states)
    SELECT kind, queue, args, state, priority, max_attempts, run_at,
           metadata, tags, unique_key, CAST(unique_states AS bit(8))
    FROM pg_temp.awa_insert_stage
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

-- name: awa_pg_schema
-- True on a database the real Awa (awa-pg) migrated: its storage (awa.jobs a
-- view over its own tables, no awa.unique_key_holder) is not ours, so the
-- worker, the unique bulk insert and the Django admin refuse it up front
-- rather than failing statement by statement. Our migrations never create
-- awa.schema_version.
SELECT to_regclass('awa.schema_version') IS NOT NULL AS present

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

-- name: drop_awa_schema
-- The undo of the first migration (Django's `migrate awa_django zero`, Alembic's
-- downgrade_awa): run by drop_schema_connection only after the check that the
-- real Awa did not migrate this database.
DROP SCHEMA IF EXISTS awa CASCADE

-- ---------------------------------------------------------------------------
-- Worker runtime. Every write about a held job matches (id, run_lease, state).
-- ---------------------------------------------------------------------------

-- name: claim_jobs
-- Candidates are picked in a CTE (an optimisation fence, so LIMIT holds under
-- concurrency) with SKIP LOCKED; the UPDATE re-checks the state. It takes them
-- as an array of ids (primary-key probes): the worker's pool runs generic
-- plans (drivers.connect.create_pool), and joined to the CTE, whose size a
-- generic plan guesses as a tenth of the table, the UPDATE was planned as a
-- merge join over the whole primary key. The re-check compares state::text,
-- as complete_jobs does: compared as the enum, it matches jobs_dispatch_idx's
-- predicate, and on a table without statistics (a bulk load before
-- autovacuum's first ANALYZE, a server with autovacuum off) the generic plan
-- read that whole index, every available job, for the ids at every claim
-- (a drain of 40,000 jobs ran at 3,400 jobs/s instead of 20,000).
-- A paused queue claims nothing. Each claim starts a new attempt with a
-- fresh run_lease (the fencing token) and its own deadline. It also drops any
-- callback an earlier attempt registered: while a job runs, its callback_id
-- can only be one this attempt registered (under this run_lease), so a late
-- callback of an earlier attempt finds nothing (see complete_external).
-- Only what the worker needs comes back (the queue is the claimer's own; the
-- deadline is the same for every row, the claim's now() plus the deadline; the
-- dispatch key, to continue from). The two times come back as seconds since
-- the epoch (float8; datetime.fromtimestamp gives back the exact microsecond
-- until the year 2242): asyncpg makes a datetime of a timestamptz at about a
-- microsecond each, two per job, where the worker needs one per claim (the
-- deadline, and the greatest dispatch key).
-- The scan starts after a dispatch key (priority, run_at, id), an index
-- condition of jobs_dispatch_idx: while it drains a backlog, a producer
-- continues from the last job it claimed instead of scanning, at every claim,
-- the index entries of every job claimed since the last vacuum (halfway
-- through a million-job backlog a claim of 200 read 2,800 pages for them, 9 ms).
-- Any other claim starts before every job (producer.FROM_THE_START).
-- The same statement records who claimed (awa.job_claims, the job timeline's
-- "attempt N on host/pid"): ONE row per claim statement with the ids it
-- claimed, whose claimed_at is their attempted_at (the same now()). No extra
-- round trip, and no row per job on the hot path.
WITH candidates AS (
    SELECT id
    FROM awa.jobs
    WHERE state = 'available'
      AND queue = %(queue)s
      AND (priority, run_at, id) > (CAST(%(after_priority)s AS smallint), CAST(%(after_run_at)s AS timestamptz),
                                    CAST(%(after_id)s AS bigint))
      AND NOT EXISTS (SELECT 1 FROM awa.queue_meta m WHERE m.queue = %(queue)s AND m.paused)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE awa.jobs AS j
    SET state = 'running',
        attempt = j.attempt + 1,
        run_lease = j.run_lease + 1,
        attempted_at = now(),
        heartbeat_at = now(),
        deadline_at = now() + make_interval(secs => %(deadline_seconds)s),
        callback_id = NULL,
        callback_timeout_at = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM candidates)) AND j.state::text = 'available'
    RETURNING j.id, j.kind, j.args::text AS args, j.priority, j.attempt, j.max_attempts,
              j.run_lease, j.metadata::text AS metadata, j.tags, j.progress::text AS progress,
              date_part('epoch', j.deadline_at) AS deadline_epoch, date_part('epoch', j.run_at) AS run_at_epoch
), recorded AS (
    INSERT INTO awa.job_claims (claimed_at, instance_id, worker, job_ids)
    SELECT now(), CAST(%(instance_id)s AS uuid), CAST(%(worker)s AS text), array_agg(id)
    FROM claimed
    HAVING count(*) > 0
)
SELECT id, kind, args, priority, attempt, max_attempts, run_lease, metadata, tags, progress, deadline_epoch,
       run_at_epoch
FROM claimed

-- name: complete_jobs
-- Batched completion; ids missing from the result were superseded (stale).
-- state::text keeps the rows found through the primary key: with a plain
-- state = 'running' the planner scans a partial index on running jobs, which
-- under load is full of dead entries of just-finished jobs (each completion
-- then costs O(jobs finished lately), not O(batch)).
-- ids and leases arrive as array literals ('{1,2,3}', see completer.int_array)
-- rather than lists: asyncpg checks each element of a list parameter against
-- collections.abc.Iterable, a Python-level ABC call per element, which was
-- 3% of the worker's instructions per drained job.
-- The ids completed come back as one array in one row (NULL for none), not a
-- row each: asyncpg makes a Record of every row, about 2,200 instructions per
-- job against 600 for the array.
WITH done AS (
    UPDATE awa.jobs AS j
    SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL
    FROM unnest(CAST(CAST(%(ids)s AS text) AS bigint[]), CAST(CAST(%(leases)s AS text) AS bigint[])) AS d(id, lease)
    WHERE j.id = d.id AND j.run_lease = d.lease AND j.state::text = 'running'
    RETURNING j.id
)
SELECT array_agg(id) AS ids FROM done

-- fragment: attempt_fence
-- The row of one attempt a worker holds: the job, under its run_lease, still
-- running. state::text rather than state: compared as the enum, the planner
-- may read the job through jobs_heartbeat_idx (a partial index of running
-- jobs) instead of its primary key when its statistics say few jobs run, as
-- they do in a generic plan; under load that index holds every running job and
-- the dead entries of just-finished ones, and each write would scan them all.
id = %(id)s AND run_lease = %(lease)s AND state::text = 'running'

-- name: complete_job_with_progress
UPDATE awa.jobs
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
    progress = COALESCE(CAST(%(progress)s AS jsonb), progress),
    metadata = metadata || CAST(%(metadata)s AS jsonb)
WHERE /* include: attempt_fence */
RETURNING id

-- fragment: attempt_claimant
-- The claim that started the attempt of "e" (a job, or a CTE of the
-- statement with its id and attempted_at): awa.job_claims by claimed_at =
-- attempted_at (job_claims_claimed_at_idx), then the id. Statements that end
-- an attempt other than by the batched completion use it to give the attempt
-- its own awa.job_attempts row; the timeline, to name the latest attempt's worker.
JOIN LATERAL (
    SELECT c.instance_id, c.worker FROM awa.job_claims AS c
    WHERE c.claimed_at = e.attempted_at AND e.id = ANY(c.job_ids)
    LIMIT 1
) AS c ON true

-- name: finish_attempt
-- Any outcome other than plain completion: retryable, failed, cancelled or
-- snoozed (scheduled/available, attempt given back). Progress and metadata
-- written by the handler are kept across retries and snoozes. The attempt
-- gets its own awa.job_attempts row (the job timeline), with the snooze if
-- it was one.
WITH finished AS (
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
    WHERE /* include: attempt_fence */
    RETURNING id, run_lease, run_at, attempted_at, attempt + CAST(%(refund)s AS smallint) AS attempt
), recorded AS (
    INSERT INTO awa.job_attempts AS a
        (job_id, run_lease, attempt, instance_id, worker, started_at, snoozed_at, snoozed_until)
    SELECT e.id, e.run_lease, e.attempt, c.instance_id, c.worker, e.attempted_at,
           CASE WHEN CAST(%(refund)s AS smallint) = 1 THEN now() END,
           CASE WHEN CAST(%(refund)s AS smallint) = 1 THEN e.run_at END
    FROM finished AS e /* include: attempt_claimant */
    ON CONFLICT (job_id, run_lease) DO UPDATE
    SET snoozed_at = EXCLUDED.snoozed_at, snoozed_until = EXCLUDED.snoozed_until
)
SELECT id FROM finished

-- name: heartbeat_worker
-- The heartbeat thread's one statement per interval: this process's registry
-- row (awa.runtime_instances, for the admin's workers page) and the heartbeat
-- of every attempt it holds (heartbeat_jobs below, same locking rules).
WITH instance AS (
    INSERT INTO awa.runtime_instances AS r
        (instance_id, hostname, pid, version, queues, jobs_held, is_leader, started_at, heartbeat_at)
    VALUES (%(instance_id)s, %(hostname)s, %(pid)s, %(version)s, CAST(%(queues)s AS jsonb),
            cardinality(CAST(%(ids)s AS bigint[])), %(is_leader)s, CAST(%(started_at)s AS timestamptz), now())
    ON CONFLICT (instance_id) DO UPDATE
    SET queues = EXCLUDED.queues, jobs_held = EXCLUDED.jobs_held, is_leader = EXCLUDED.is_leader,
        heartbeat_at = now()
), d AS (
    SELECT * FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(leases)s AS bigint[])) AS d(id, lease)
), beat AS (
    UPDATE awa.jobs AS j
    SET heartbeat_at = now()
    FROM (
        SELECT h.id
        FROM awa.jobs AS h JOIN d ON h.id = d.id AND h.run_lease = d.lease
        WHERE h.state = 'running'
        FOR UPDATE OF h SKIP LOCKED
    ) AS free
    WHERE j.id = free.id
)
SELECT j.id
FROM awa.jobs AS j JOIN d ON j.id = d.id AND j.run_lease = d.lease
WHERE j.state = 'running'

-- name: delete_runtime_instance
-- Clean shutdown: the process leaves the registry.
DELETE FROM awa.runtime_instances WHERE instance_id = %(instance_id)s

-- name: read_attempts
-- After a lost connection left a write's commit unknown: where each attempt
-- stands now (its state, and the run_lease that says whether it is still ours).
SELECT j.id, j.state::text AS state, j.run_lease
FROM awa.jobs AS j
WHERE j.id = ANY(CAST(%(ids)s AS bigint[]))

-- name: heartbeat_jobs
-- Never waits for a row lock (SKIP LOCKED): a row locked right now is being
-- finalized, rescued or released, and misses this beat only. Waiting would
-- deadlock with the same worker's batched completion (two multi-row UPDATEs
-- locking overlapping rows in no set order) and hold up the whole batch's
-- heartbeats meanwhile. Returns the ids still held under their lease as of
-- this statement, beaten or skipped: the others were superseded.
WITH d AS (
    SELECT * FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(leases)s AS bigint[])) AS d(id, lease)
), beat AS (
    UPDATE awa.jobs AS j
    SET heartbeat_at = now()
    FROM (
        SELECT h.id
        FROM awa.jobs AS h JOIN d ON h.id = d.id AND h.run_lease = d.lease
        WHERE h.state = 'running'
        FOR UPDATE OF h SKIP LOCKED
    ) AS free
    WHERE j.id = free.id
)
SELECT j.id
FROM awa.jobs AS j JOIN d ON j.id = d.id AND j.run_lease = d.lease
WHERE j.state = 'running'

-- name: flush_progress
UPDATE awa.jobs
SET progress = COALESCE(CAST(%(progress)s AS jsonb), progress),
    metadata = metadata || CAST(%(metadata)s AS jsonb)
WHERE /* include: attempt_fence */
RETURNING id

-- name: release_jobs
-- Shutdown: hand unfinished attempts back at once, without spending them; the
-- attempt's own awa.job_attempts row says so (the job timeline).
WITH released AS (
    UPDATE awa.jobs AS j
    SET state = 'available', run_at = now(), attempt = j.attempt - 1,
        heartbeat_at = NULL, deadline_at = NULL
    FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(leases)s AS bigint[])) AS d(id, lease)
    WHERE j.id = d.id AND j.run_lease = d.lease AND j.state::text = 'running'  -- as complete_jobs
    RETURNING j.id, j.run_lease, j.attempt + 1 AS attempt, j.attempted_at
), recorded AS (
    INSERT INTO awa.job_attempts AS a (job_id, run_lease, attempt, instance_id, worker, started_at, released_at)
    SELECT e.id, e.run_lease, e.attempt, c.instance_id, c.worker, e.attempted_at, now()
    FROM released AS e /* include: attempt_claimant */
    ON CONFLICT (job_id, run_lease) DO UPDATE SET released_at = EXCLUDED.released_at
)
SELECT id FROM released

-- name: upsert_queue_rollups
-- The worker's outcome counters (awa_bridge.worker.rollup), every few
-- seconds in one statement: one array element per (queue, minute) counted.
INSERT INTO awa.queue_rollups AS r (queue, minute, completed, failed, retried, cancelled)
SELECT * FROM unnest(CAST(%(queues)s AS text[]), CAST(%(minutes)s AS timestamptz[]),
                     CAST(%(completed)s AS bigint[]), CAST(%(failed)s AS bigint[]),
                     CAST(%(retried)s AS bigint[]), CAST(%(cancelled)s AS bigint[]))
ON CONFLICT (queue, minute) DO UPDATE
SET completed = r.completed + EXCLUDED.completed, failed = r.failed + EXCLUDED.failed,
    retried = r.retried + EXCLUDED.retried, cancelled = r.cancelled + EXCLUDED.cancelled

-- ---------------------------------------------------------------------------
-- Maintenance (leader only). Candidates are locked with SKIP LOCKED and the
-- UPDATE re-checks state and lease, so a row being finalized concurrently is
-- skipped rather than overwritten (River #1302).
-- ---------------------------------------------------------------------------

-- name: prune_queue_rollups
-- Rollups past the longest chart window (a day) plus a margin; the leader's
-- retention tick (queue_rollups_minute_idx).
WITH deleted AS (DELETE FROM awa.queue_rollups WHERE minute < now() - interval '2 days' RETURNING 1)
SELECT count(*) AS deleted FROM deleted

-- name: try_leader_lock
-- Held by the leader's lease connection: the server drops it with the session,
-- so a candidate that gets it knows the previous holder's session is gone and
-- may take the lease at once instead of waiting for it to expire.
SELECT pg_try_advisory_lock(7235104991187720552) AS acquired

-- name: leader_unlock
-- A leader that lost its lease lets the advisory lock go with it.
SELECT pg_advisory_unlock(7235104991187720552) AS released

-- name: acquire_maintenance_lease
-- Take or renew the leader's lease: renewed by its holder, taken by another
-- process once it expired (the holder stopped renewing: dead, frozen, blocked)
-- or when the taker holds the advisory lock above and the holder had held it
-- too (then the holder's session ended: the lock went with it). A holder that
-- took the lease without the lock (someone else held it for a moment) is only
-- displaced by expiry (v012). holder_locked is the caller's lock, as of this
-- call. epoch grows at every change of holder. No row returned: someone else
-- leads.
INSERT INTO awa.maintenance_lease AS l (name, holder, epoch, acquired_at, renewed_at, expires_at, holder_locked)
VALUES ('maintenance', %(holder)s, 1, now(), now(), now() + make_interval(secs => %(ttl_seconds)s),
        CAST(%(locked)s AS boolean))
ON CONFLICT (name) DO UPDATE
SET holder = EXCLUDED.holder,
    epoch = l.epoch + CASE WHEN l.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE now() END,
    renewed_at = now(),
    expires_at = EXCLUDED.expires_at,
    holder_locked = EXCLUDED.holder_locked
WHERE l.holder = EXCLUDED.holder OR l.expires_at < now() OR (EXCLUDED.holder_locked AND l.holder_locked)
RETURNING epoch, acquired_at = renewed_at AS fresh

-- name: lease_holder_locked
-- Whether the lease's holder held the leader's advisory lock at its last
-- renewal: only then does getting the lock tell a candidate anything.
SELECT holder_locked FROM awa.maintenance_lease WHERE name = 'maintenance'

-- name: release_maintenance_lease
-- Clean shutdown: let the next candidate take over at its next election.
UPDATE awa.maintenance_lease SET expires_at = now()
WHERE name = 'maintenance' AND holder = %(holder)s
RETURNING epoch

-- name: server_clock
-- The server's clock as this statement starts: where the leader's view of the
-- heartbeats begins (view_still_fresh).
SELECT statement_timestamp() AS at

-- fragment: view_still_fresh
-- The leader's judgement of other processes' heartbeats holds only if it has
-- been running since it last checked its own gaps (services.View): a leader
-- frozen after that check sends this statement at the thaw, when workers frozen
-- with it look stale though alive. So the statement does nothing unless it
-- starts within max_gap_seconds of viewed_at (server_clock, read before that
-- check), both on the server's clock. Without a view (viewed_at NULL: a
-- direct call) it is not guarded.
(CAST(%(viewed_at)s AS timestamptz) IS NULL
 OR statement_timestamp() <= CAST(%(viewed_at)s AS timestamptz) + make_interval(secs => %(max_gap_seconds)s))

-- name: prune_runtime_instances
-- Registry rows of processes that stopped refreshing them (died without a
-- clean shutdown), older than the heartbeat staleness window.
WITH doomed AS (
    SELECT ctid FROM awa.runtime_instances
    WHERE heartbeat_at < now() - make_interval(secs => %(staleness_seconds)s)
      AND /* include: view_still_fresh */
    LIMIT %(limit)s
), deleted AS (
    DELETE FROM awa.runtime_instances WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT count(*) AS deleted FROM deleted

-- name: promote_due
-- Due scheduled and retryable jobs become available, their queues notified.
-- A due job whose unique key another live job took meanwhile is cancelled as
-- superseded instead (awa.unique_key_holder; R30). "moved" counts both, so
-- that the maintenance pass takes a batch of superseded jobs for the full
-- batch it was and repeats.
WITH due AS (
    SELECT id, awa.unique_key_holder(id, unique_key, unique_states, 'available') AS holder
    FROM awa.jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE awa.jobs AS j
    SET state = CASE WHEN due.holder IS NULL THEN 'available' ELSE 'cancelled' END::awa.job_state,
        finalized_at = CASE WHEN due.holder IS NULL THEN NULL ELSE now() END,
        errors = CASE WHEN due.holder IS NULL THEN j.errors ELSE array_append(j.errors, jsonb_build_object(
            'error', format('superseded: job %%s holds its unique key', due.holder),
            'type', 'Superseded', 'attempt', j.attempt, 'at', now())) END
    FROM due
    WHERE j.id = due.id AND j.state IN ('scheduled', 'retryable')
    RETURNING j.queue, j.state
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM (SELECT DISTINCT queue FROM promoted WHERE state = 'available') AS q
)
SELECT (SELECT count(*) FROM promoted) AS moved, (SELECT count(*) FROM notified) AS notified

-- fragment: rescue_running
-- The rest of a rescue of running attempts, after its `candidates` CTE (id,
-- run_lease, the live job holding its unique key if any, the reason and its
-- type): each rescue spends the attempt (retryable, or failed when none are
-- left; cancelled when a job holding its unique key took over meanwhile, R30),
-- gives the rescued attempt its own awa.job_attempts row (the job timeline)
-- and returns what it did, for the log and the rescued hooks.
rescued AS (
    UPDATE awa.jobs AS j
    SET state = CASE WHEN c.holder IS NOT NULL THEN 'cancelled'
                     WHEN j.attempt >= j.max_attempts THEN 'failed'
                     ELSE 'retryable' END::awa.job_state,
        run_at = now(),
        finalized_at = CASE WHEN j.attempt >= j.max_attempts OR c.holder IS NOT NULL THEN now() END,
        errors = array_append(j.errors, jsonb_build_object(
            'error', c.reason || CASE WHEN c.holder IS NULL THEN ''
                                      ELSE format('; superseded: job %%s holds its unique key', c.holder) END,
            'type', c.type, 'attempt', j.attempt, 'at', now())),
        heartbeat_at = NULL,
        deadline_at = NULL
    FROM candidates AS c
    WHERE j.id = c.id AND j.run_lease = c.run_lease AND j.state = 'running'
    RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt, j.run_lease, j.attempted_at,
              j.errors[cardinality(j.errors)] ->> 'error' AS reason
), recorded AS (
    INSERT INTO awa.job_attempts (job_id, run_lease, attempt, instance_id, worker, started_at)
    SELECT e.id, e.run_lease, e.attempt, c.instance_id, c.worker, e.attempted_at
    FROM rescued AS e /* include: attempt_claimant */
    ON CONFLICT (job_id, run_lease) DO NOTHING
)
SELECT id, kind, queue, state, attempt, reason FROM rescued

-- fragment: unique_holder_if_rescued
-- The live job holding this one's unique key, should the rescue take it back
-- out of 'running' (awa.unique_key_holder, R30).
awa.unique_key_holder(id, unique_key, unique_states,
    CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state) AS holder

-- name: rescue_stale_heartbeats
-- The attempts the rescuing process holds itself (id, run_lease) are left out:
-- that process is alive (it is running this statement), whatever its heartbeats
-- say; they go stale with it when it is frozen or starved, and it may resume
-- and send this statement before its heartbeat thread has beaten again. The
-- others' are judged only while the leader's view is fresh (view_still_fresh).
WITH candidates AS (
    SELECT id, run_lease, /* include: unique_holder_if_rescued */,
           format('heartbeat stale: no heartbeat for %%s s (attempt %%s); worker presumed dead',
                  CAST(%(staleness_seconds)s AS float8), attempt) AS reason,
           'HeartbeatStale' AS type
    FROM awa.jobs
    WHERE state = 'running'
      AND heartbeat_at < now() - make_interval(secs => %(staleness_seconds)s)
      AND /* include: view_still_fresh */
      AND (id, run_lease) NOT IN (
          SELECT * FROM unnest(CAST(%(held_ids)s AS bigint[]), CAST(%(held_leases)s AS bigint[])))
    ORDER BY heartbeat_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), /* include: rescue_running */

-- name: rescue_expired_deadlines
-- Reads the running jobs through jobs_heartbeat_idx (v011: no index on deadline_at).
WITH candidates AS (
    SELECT id, run_lease, /* include: unique_holder_if_rescued */,
           format('deadline exceeded (attempt %%s)', attempt) AS reason,
           'DeadlineExceeded' AS type
    FROM awa.jobs
    WHERE state = 'running' AND deadline_at < now()
    ORDER BY deadline_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), /* include: rescue_running */

-- name: delete_finished
-- Retention: delete a bounded batch of finished jobs older than their state's
-- window (their results, ordering keys and attempt records go with them, by
-- the statement trigger jobs_delete_job_rows, v010). Each state's expired
-- jobs are a range of jobs_finalized_idx (state, finalized_at), oldest first.
-- The batch is deleted by row address (a TID scan): deleting by id IN (the
-- batch) was planned as a hash join over a sequential scan of the whole table,
-- once per batch. A row changed since the batch was read (an operator retried
-- it) has a new address and is not deleted; it still counts in picked, so a
-- batch that picked its limit is full however many of its rows were deleted.
WITH doomed AS (
    (SELECT ctid FROM awa.jobs
     WHERE state = 'completed' AND finalized_at < now() - make_interval(secs => %(completed_seconds)s)
     ORDER BY finalized_at
     LIMIT %(limit)s)
    UNION ALL
    (SELECT ctid FROM awa.jobs
     WHERE state IN ('failed', 'cancelled') AND finalized_at < now() - make_interval(secs => %(failed_seconds)s)
     LIMIT %(limit)s)
    LIMIT %(limit)s
), deleted AS (
    DELETE FROM awa.jobs WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, (SELECT count(*) FROM doomed) AS picked

-- name: prune_job_actions
-- History retention (WorkerConfig.history_retention): operator actions older
-- than it, oldest first, whatever became of their job; the record of a
-- deletion is kept as long as any other (job_actions_at_idx). By row address,
-- as delete_finished.
WITH doomed AS (
    SELECT ctid FROM awa.job_actions
    WHERE at < now() - make_interval(secs => %(retention_seconds)s)
    ORDER BY at
    LIMIT %(limit)s
), deleted AS (
    DELETE FROM awa.job_actions WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT count(*) AS deleted FROM deleted

-- name: prune_job_claims
-- Claim records (awa.job_claims) no job needs any more, oldest first: those
-- older than the completed retention of which no job still has this claim as
-- its latest attempt (attempted_at = claimed_at) without a row of its own in
-- awa.job_attempts. Typically every job of a claim completed and was deleted
-- by retention; a job still running or retained keeps its claim.
-- Each claim's jobs are probed by primary key: OFFSET 0 keeps both NOT EXISTS
-- as subplans run per row, where the planner could otherwise make them anti
-- joins. On tables without statistics PostgreSQL 18 did: a merge anti join on
-- attempted_at = claimed_at over a hash of every job and every attempt record,
-- the whole of both tables read for each batch.
WITH doomed AS (
    SELECT c.ctid FROM awa.job_claims AS c
    WHERE c.claimed_at < now() - make_interval(secs => %(retention_seconds)s)
      AND NOT EXISTS (
          SELECT 1 FROM awa.jobs AS j
          WHERE j.id = ANY(c.job_ids) AND j.attempted_at = c.claimed_at
            AND NOT EXISTS (
                SELECT 1 FROM awa.job_attempts AS a WHERE a.job_id = j.id AND a.run_lease = j.run_lease OFFSET 0
            )
          OFFSET 0
      )
    ORDER BY c.claimed_at
    LIMIT %(limit)s
), deleted AS (
    DELETE FROM awa.job_claims WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT count(*) AS deleted FROM deleted

-- name: prune_job_attempts
-- History retention for attempt records (job_attempts_started_idx): those of
-- jobs an operator deleted, or of jobs still alive after that long (a
-- finished job's go with it, in delete_finished).
WITH doomed AS (
    SELECT ctid FROM awa.job_attempts
    WHERE started_at < now() - make_interval(secs => %(retention_seconds)s)
    ORDER BY started_at
    LIMIT %(limit)s
), deleted AS (
    DELETE FROM awa.job_attempts WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT count(*) AS deleted FROM deleted

-- ---------------------------------------------------------------------------
-- Queues and inspection.
-- ---------------------------------------------------------------------------

-- name: pause_queue
INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by)
VALUES (%(queue)s, true, now(), %(paused_by)s)
ON CONFLICT (queue) DO UPDATE SET paused = true, paused_at = now(), paused_by = EXCLUDED.paused_by
RETURNING queue

-- name: queue_known
-- Whether anything has used a queue name: a job (one probe of
-- jobs_queue_state_idx), a pause row, a live worker running it, or recorded
-- throughput (one probe of queue_rollups_pkey: a worker ran it, even if its
-- jobs are deleted since). The CLI refuses to pause a name nothing knows (a
-- typo) unless told to create it.
SELECT EXISTS (SELECT 1 FROM awa.jobs WHERE queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM awa.queue_meta WHERE queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM awa.queue_rollups WHERE queue = %(queue)s)
    OR EXISTS (
        SELECT 1 FROM awa.runtime_instances
        WHERE queues @> jsonb_build_array(jsonb_build_object('name', CAST(%(queue)s AS text)))
    ) AS known

-- name: resume_queue
-- Only a paused queue has anything to undo: a name that was never paused (a
-- typo among them) gets no row, and the caller learns it from no row returned.
UPDATE awa.queue_meta SET paused = false, paused_at = NULL, paused_by = NULL
WHERE queue = %(queue)s AND paused
RETURNING queue

-- fragment: job_columns
-- The whole job as inspection and the admin operations return it: the 27
-- columns of awa.jobs (as j), in the contract's order, with the types that not
-- every driver decodes alike (json, enums, arrays of json, bit, uuid) as text.
j.id, j.kind, j.queue, j.args::text AS args, j.state::text AS state, j.priority,
j.attempt, j.max_attempts, j.run_at, j.heartbeat_at, j.deadline_at, j.attempted_at,
j.finalized_at, j.created_at, to_jsonb(j.errors)::text AS errors,
j.metadata::text AS metadata, j.tags, j.unique_key, j.unique_states::text AS unique_states,
j.callback_id::text AS callback_id, j.callback_timeout_at, j.callback_filter,
j.callback_on_complete, j.callback_on_fail, j.callback_transform, j.run_lease,
j.progress::text AS progress

-- name: get_job
SELECT /* include: job_columns */
FROM awa.jobs AS j WHERE j.id = %(id)s

-- name: list_job_actions
-- A job's operator actions for its timeline (job_actions_job_idx).
SELECT action, operator, prior_state::text AS prior_state, at
FROM awa.job_actions
WHERE job_id = %(id)s
ORDER BY at, id
LIMIT 200

-- name: list_job_attempts
-- A job's latest 200 attempts for its timeline, oldest first: who claimed
-- each and when, and the snooze or hand-back that ended it if one did. An
-- attempt that ended other than by completion has its own row (primary key
-- job_id, run_lease); the latest attempt, running or completed, is found
-- through the claim that started it (claimed_at = attempted_at).
SELECT * FROM (
    SELECT run_lease, attempt, worker, instance_id::text AS instance_id, started_at, snoozed_at, snoozed_until,
           released_at
    FROM awa.job_attempts
    WHERE job_id = %(id)s
    UNION ALL
    SELECT e.run_lease, e.attempt, c.worker, c.instance_id::text, e.attempted_at, NULL, NULL, NULL
    FROM awa.jobs AS e /* include: attempt_claimant */
    WHERE e.id = %(id)s
      AND NOT EXISTS (SELECT 1 FROM awa.job_attempts AS a WHERE a.job_id = e.id AND a.run_lease = e.run_lease)
    ORDER BY run_lease DESC
    LIMIT 200
) AS latest
ORDER BY run_lease

-- name: list_jobs
SELECT id, kind, queue, state::text AS state, priority, attempt, max_attempts, run_at, created_at
FROM awa.jobs
WHERE (CAST(%(queue)s AS text) IS NULL OR queue = %(queue)s)
  AND (CAST(%(state)s AS text) IS NULL OR state = CAST(%(state)s AS awa.job_state))
  AND (CAST(%(kind)s AS text) IS NULL OR kind = %(kind)s)
ORDER BY id DESC
LIMIT %(limit)s

-- fragment: cron_job_upsert
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

-- name: upsert_cron_job
-- The upsert above, and the schedule marked declared by %(owner)s in
-- awa.cron_job_sources (a database-only schedule of the same name becomes
-- declared: code wins). Returns a row only when something was inserted or changed.
WITH upserted AS (
    /* include: cron_job_upsert */
), sourced AS (
    INSERT INTO awa.cron_job_sources AS s (name, source, owner)
    VALUES (CAST(%(name)s AS text), 'declared', CAST(%(owner)s AS text))
    ON CONFLICT (name) DO UPDATE SET source = 'declared', owner = EXCLUDED.owner
    WHERE (s.source, s.owner) IS DISTINCT FROM ('declared', EXCLUDED.owner)
    RETURNING s.name
)
SELECT name FROM upserted UNION SELECT name FROM sourced

-- name: upsert_cron_job_plain
-- On a database migrated by awa-pg (no awa.cron_job_sources): the upsert
-- alone, with no record of where the schedule comes from.
/* include: cron_job_upsert */

-- name: prune_declared_cron_jobs
-- Settings and code are the source of truth: at worker start, the schedules
-- %(owner)s declared before but no longer declares are deleted (with their
-- source rows), so they never fire again. Database-only schedules and other
-- owners' are left alone.
DELETE FROM awa.cron_jobs AS c
USING awa.cron_job_sources AS s
WHERE s.name = c.name AND s.source = 'declared' AND s.owner = CAST(%(owner)s AS text)
  AND NOT (c.name = ANY(CAST(%(names)s AS text[])))
RETURNING c.name

-- fragment: cron_job_create
-- A new schedule; never replaces an existing one (no row returned then).
INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, queue, args, priority, max_attempts,
                           tags, metadata, missed_fire_policy)
VALUES (CAST(%(name)s AS text), CAST(%(cron_expr)s AS text), CAST(%(timezone)s AS text),
        CAST(%(kind)s AS text), CAST(%(queue)s AS text), CAST(%(args)s AS jsonb),
        CAST(%(priority)s AS smallint), CAST(%(max_attempts)s AS smallint), CAST(%(tags)s AS text[]),
        CAST(%(metadata)s AS jsonb), CAST(%(missed_fire_policy)s AS text))
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: create_cron_job
-- A database-only schedule (admin, `awa_cron create`): a worker never deletes it.
WITH created AS (
    /* include: cron_job_create */
), sourced AS (
    INSERT INTO awa.cron_job_sources (name, source) SELECT name, 'database' FROM created
    RETURNING name
)
SELECT name FROM created WHERE EXISTS (SELECT 1 FROM sourced)

-- name: create_cron_job_plain
-- On a database migrated by awa-pg (no awa.cron_job_sources): the schedule alone.
/* include: cron_job_create */

-- name: lock_cron_job_source_plain
-- On a database migrated by awa-pg: the schedule's row locked, its source unknown.
SELECT name, CAST(NULL AS text) AS source, CAST(NULL AS text) AS owner
FROM awa.cron_jobs
WHERE name = CAST(%(name)s AS text)
FOR UPDATE

-- name: lock_cron_job_source
-- Where a schedule comes from, its row locked for an edit or a delete
-- (source NULL: no source row, a schedule written by someone else).
SELECT c.name, s.source, s.owner
FROM awa.cron_jobs AS c LEFT JOIN awa.cron_job_sources AS s ON s.name = c.name
WHERE c.name = CAST(%(name)s AS text)
FOR UPDATE OF c

-- name: update_cron_job
-- Edit of a database-only schedule (the caller checked its source under the
-- lock). Firing goes on from last_enqueued_at with the new expression.
UPDATE awa.cron_jobs
SET cron_expr = CAST(%(cron_expr)s AS text), timezone = CAST(%(timezone)s AS text),
    kind = CAST(%(kind)s AS text), queue = CAST(%(queue)s AS text), args = CAST(%(args)s AS jsonb),
    priority = CAST(%(priority)s AS smallint), max_attempts = CAST(%(max_attempts)s AS smallint),
    tags = CAST(%(tags)s AS text[]), metadata = CAST(%(metadata)s AS jsonb),
    missed_fire_policy = CAST(%(missed_fire_policy)s AS text), updated_at = now()
WHERE name = CAST(%(name)s AS text)
RETURNING name

-- fragment: cron_job_columns
c.name, c.cron_expr, c.timezone, c.kind, c.queue, c.args::text AS args, c.priority,
       c.max_attempts, c.tags, c.metadata::text AS metadata, c.missed_fire_policy, c.last_enqueued_at,
       c.created_at, c.updated_at, c.paused_at, c.paused_by, clock_timestamp() AS db_now

-- name: list_cron_jobs
-- source: 'declared' (settings / code, owned by `owner`) or 'database' (no
-- source row: written by someone else, treated as database-only).
SELECT /* include: cron_job_columns */, COALESCE(s.source, 'database') AS source, s.owner
FROM awa.cron_jobs AS c LEFT JOIN awa.cron_job_sources AS s ON s.name = c.name
ORDER BY c.name

-- name: list_cron_jobs_plain
-- On a database migrated by awa-pg (no awa.cron_job_sources): source unknown (NULL).
SELECT /* include: cron_job_columns */, CAST(NULL AS text) AS source, CAST(NULL AS text) AS owner
FROM awa.cron_jobs AS c
ORDER BY c.name

-- name: get_cron_job
SELECT /* include: cron_job_columns */, COALESCE(s.source, 'database') AS source, s.owner
FROM awa.cron_jobs AS c LEFT JOIN awa.cron_job_sources AS s ON s.name = c.name
WHERE c.name = CAST(%(name)s AS text)

-- name: get_cron_job_plain
SELECT /* include: cron_job_columns */, CAST(NULL AS text) AS source, CAST(NULL AS text) AS owner
FROM awa.cron_jobs AS c
WHERE c.name = CAST(%(name)s AS text)

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

-- ---------------------------------------------------------------------------
-- Admin operations (awa_bridge.admin). Each single-job operation is ONE
-- statement: `target` locks the row (waiting for a concurrent writer, then
-- seeing its committed result), `changed` applies the action only when the
-- locked state allows it, and the final SELECT reports the state found, so
-- the caller can tell "no such job" (no row) from "wrong state" (row, id NULL)
-- without a second, racy read. Allowed states come in as %(allowed)s.
-- ---------------------------------------------------------------------------

-- name: retry_job
-- Manual retry, as in Awa: available now with a fresh attempt budget
-- (attempt = 0); errors and progress are kept as history.
WITH target AS (
    SELECT id, state FROM awa.jobs WHERE id = %(id)s FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
        heartbeat_at = NULL, deadline_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
        callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
    FROM target
    WHERE j.id = target.id AND target.state = ANY(CAST(%(allowed)s AS awa.job_state[]))
    RETURNING /* include: job_columns */
), logged AS (
    -- The operator's action on the job's timeline (awa.job_actions), when one is named.
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT changed.id, 'retry', CAST(%(operator)s AS text), target.state
    FROM changed JOIN target ON target.id = changed.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM changed
)
SELECT target.state::text AS prior_state, (SELECT count(*) FROM notified) AS notified, changed.*
FROM target LEFT JOIN changed ON true

-- name: cancel_job
-- A running job is cancelled too: its heartbeat and its late completion are
-- fenced by state = 'running', so the worker notices (job.cancelled) and its
-- writes change nothing.
WITH target AS (
    SELECT id, state FROM awa.jobs WHERE id = %(id)s FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        errors = array_append(j.errors, jsonb_build_object(
            'error', format('cancelled by an operator while %%s', target.state),
            'type', 'AdminCancel', 'attempt', j.attempt, 'at', now())),
        callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
        callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
    FROM target
    WHERE j.id = target.id AND target.state = ANY(CAST(%(allowed)s AS awa.job_state[]))
    RETURNING /* include: job_columns */
), logged AS (
    -- The operator's action on the job's timeline (awa.job_actions), when one is named.
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT changed.id, 'cancel', CAST(%(operator)s AS text), target.state
    FROM changed JOIN target ON target.id = changed.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
)
SELECT target.state::text AS prior_state, changed.* FROM target LEFT JOIN changed ON true

-- name: cancel_by_unique_key
-- The job holding the key is the one row of jobs_unique_key_idx for it: the
-- key in a state its own unique_states mask enforces.
WITH target AS (
    SELECT id, state FROM awa.jobs
    WHERE unique_key = CAST(%(unique_key)s AS bytea) AND awa.job_state_in_bitmask(unique_states, state)
    FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        errors = array_append(j.errors, jsonb_build_object(
            'error', format('cancelled by an operator (by unique key) while %%s', target.state),
            'type', 'AdminCancel', 'attempt', j.attempt, 'at', now())),
        callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
        callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
    FROM target
    WHERE j.id = target.id AND target.state = ANY(CAST(%(allowed)s AS awa.job_state[]))
    RETURNING /* include: job_columns */
)
SELECT target.id AS target_id, target.state::text AS prior_state, changed.*
FROM target LEFT JOIN changed ON true

-- name: run_job_now
WITH target AS (
    SELECT id, state FROM awa.jobs WHERE id = %(id)s FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'available', run_at = now()
    FROM target
    WHERE j.id = target.id AND target.state = ANY(CAST(%(allowed)s AS awa.job_state[]))
    RETURNING /* include: job_columns */
), logged AS (
    -- The operator's action on the job's timeline (awa.job_actions), when one is named.
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT changed.id, 'run_now', CAST(%(operator)s AS text), target.state
    FROM changed JOIN target ON target.id = changed.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM changed
)
SELECT target.state::text AS prior_state, (SELECT count(*) FROM notified) AS notified, changed.*
FROM target LEFT JOIN changed ON true

-- name: delete_job
WITH target AS (
    SELECT id, state FROM awa.jobs WHERE id = %(id)s FOR UPDATE
), changed AS (
    DELETE FROM awa.jobs AS j
    USING target
    WHERE j.id = target.id AND target.state = ANY(CAST(%(allowed)s AS awa.job_state[]))
    RETURNING /* include: job_columns */
), logged AS (
    -- The operator's action on the job's timeline (awa.job_actions), when one is named.
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT changed.id, 'delete', CAST(%(operator)s AS text), target.state
    FROM changed JOIN target ON target.id = changed.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
)
SELECT target.state::text AS prior_state, changed.* FROM target LEFT JOIN changed ON true

-- name: retry_failed_jobs
-- Every failed job of a kind and/or queue back to available with a fresh
-- attempt budget. A job whose unique key is held by a live job (or by an
-- older failed job retried in this same statement) stays failed: retrying it
-- would be a duplicate, and one such row must not abort the whole batch.
WITH failed AS (
    SELECT id, unique_key, unique_states
    FROM awa.jobs
    WHERE state = 'failed'
      AND (CAST(%(kind)s AS text) IS NULL OR kind = %(kind)s)
      AND (CAST(%(queue)s AS text) IS NULL OR queue = %(queue)s)
    FOR UPDATE
), ranked AS (
    SELECT f.id, f.unique_key,
           f.unique_key IS NOT NULL AND awa.job_state_in_bitmask(f.unique_states, 'available') AS keyed,
           row_number() OVER (PARTITION BY f.unique_key ORDER BY f.id) AS nth
    FROM failed AS f
), eligible AS (
    SELECT r.id FROM ranked AS r
    WHERE NOT r.keyed
       OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.jobs AS o
               WHERE o.unique_key = r.unique_key AND awa.job_state_in_bitmask(o.unique_states, o.state)
                 AND o.id <> r.id))
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
        heartbeat_at = NULL, deadline_at = NULL
    FROM eligible
    WHERE j.id = eligible.id
    RETURNING j.queue
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM (SELECT DISTINCT queue FROM changed) AS q
)
SELECT (SELECT count(*) FROM changed) AS retried,
       (SELECT count(*) FROM failed) - (SELECT count(*) FROM changed) AS skipped,
       (SELECT count(*) FROM notified) AS notified

-- name: queue_stats
-- Fast on a table of millions of finished jobs. Queue names come from a
-- loose index scan of jobs_queue_state_idx (one probe per queue); per queue,
-- the counts are probes of (queue, live state) in the same index, and the lag
-- is the first entry of each priority in jobs_dispatch_idx (4 probes, however
-- long the backlog); "completed in the last hour" is one range scan of
-- jobs_finalized_idx. Completed and cancelled jobs are history and are never
-- counted in full. Queues known only from queue_meta (paused before any job)
-- are a separate branch. Both keep the planner's row guesses from multiplying
-- the per-queue probes: a plan estimated above jit_above_cost is JIT-compiled
-- at every execution, which costs far more (300+ ms) than running it.
WITH RECURSIVE job_queues AS (
    (SELECT queue FROM awa.jobs WHERE CAST(%(queue)s AS text) IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM awa.jobs AS j WHERE j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM job_queues AS q
    WHERE q.queue IS NOT NULL
), queues AS (
    -- Through an array: the planner guesses ~10 elements, not the ~100 rows it
    -- guesses for a recursive CTE, and keeps the plan's estimate honest.
    SELECT unnest(ARRAY(SELECT queue FROM job_queues WHERE queue IS NOT NULL)) AS queue
    UNION ALL
    SELECT CAST(%(queue)s AS text) WHERE CAST(%(queue)s AS text) IS NOT NULL
), recent AS (
    SELECT queue, count(*) AS completed_last_hour
    FROM awa.jobs
    WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
      AND (CAST(%(queue)s AS text) IS NULL OR queue = %(queue)s)
    GROUP BY queue
)
SELECT q.queue,
       c.scheduled, c.available, c.running, c.retryable, c.waiting_external, c.failed,
       COALESCE(r.completed_last_hour, 0) AS completed_last_hour,
       EXTRACT(EPOCH FROM now() - l.oldest_run_at)::float8 AS lag_seconds,
       COALESCE(m.paused, false) AS paused
FROM queues AS q
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE s.state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE s.state = 'available') AS available,
           count(*) FILTER (WHERE s.state = 'running') AS running,
           count(*) FILTER (WHERE s.state = 'retryable') AS retryable,
           count(*) FILTER (WHERE s.state = 'waiting_external') AS waiting_external,
           count(*) FILTER (WHERE s.state = 'failed') AS failed
    FROM awa.jobs AS s
    WHERE s.queue = q.queue
      AND s.state IN ('scheduled', 'available', 'running', 'retryable', 'waiting_external', 'failed')
) AS c
CROSS JOIN LATERAL (
    SELECT min(first.run_at) AS oldest_run_at
    FROM (VALUES (1), (2), (3), (4)) AS p (priority)
    CROSS JOIN LATERAL (
        SELECT a.run_at FROM awa.jobs AS a
        WHERE a.state = 'available' AND a.queue = q.queue AND a.priority = p.priority
        ORDER BY a.run_at
        LIMIT 1
    ) AS first
) AS l
LEFT JOIN recent AS r ON r.queue = q.queue
LEFT JOIN awa.queue_meta AS m ON m.queue = q.queue
UNION ALL
SELECT m.queue, 0, 0, 0, 0, 0, 0, 0, NULL, m.paused
FROM awa.queue_meta AS m
WHERE CAST(%(queue)s AS text) IS NULL
  AND NOT EXISTS (SELECT 1 FROM awa.jobs AS j WHERE j.queue = m.queue)
ORDER BY queue

-- ---------------------------------------------------------------------------
-- Dashboard reads (awa_bridge.dashboard: the admin's overview and workers
-- pages). Charts read only the rollups the workers write, never awa.jobs.
-- ---------------------------------------------------------------------------

-- name: queue_throughput
-- Completed / failed / retried / cancelled per queue and %(unit)s ('minute'
-- or 'hour') since %(since)s: a range of queue_rollups_minute_idx.
SELECT queue, date_trunc(CAST(%(unit)s AS text), minute, 'UTC') AS bucket,
       sum(completed)::bigint AS completed, sum(failed)::bigint AS failed,
       sum(retried)::bigint AS retried, sum(cancelled)::bigint AS cancelled
FROM awa.queue_rollups
WHERE minute >= CAST(%(since)s AS timestamptz)
GROUP BY 1, 2
ORDER BY 1, 2

-- name: queue_oldest_waiting
-- Per queue, when the longest-due available job was enqueued: the first
-- entry of each priority in jobs_dispatch_idx (4 probes per queue).
SELECT q.queue, min(f.created_at) AS oldest_created_at
FROM unnest(CAST(%(queues)s AS text[])) AS q (queue)
CROSS JOIN (VALUES (1), (2), (3), (4)) AS p (priority)
CROSS JOIN LATERAL (
    SELECT a.created_at FROM awa.jobs AS a
    WHERE a.state = 'available' AND a.queue = q.queue AND a.priority = p.priority
    ORDER BY a.run_at
    LIMIT 1
) AS f
GROUP BY q.queue

-- name: list_runtime_instances
-- Every registered worker process, with whether its heartbeat is within the
-- staleness window (a row past it is a process that died without saying so).
SELECT instance_id::text AS instance_id, hostname, pid, version, queues::text AS queues, jobs_held,
       is_leader, started_at, heartbeat_at,
       heartbeat_at > clock_timestamp() - make_interval(secs => CAST(%(staleness)s AS float8)) AS live,
       clock_timestamp() AS db_now
FROM awa.runtime_instances
ORDER BY hostname, pid, started_at

-- ---------------------------------------------------------------------------
-- Set-based admin operations (awa_bridge.admin.retry_jobs / cancel_jobs /
-- run_jobs_now / delete_jobs). ONE statement per batch: `picked` is the batch,
-- chosen either by id (%(ids)s, a selection) or by filter (%(ids)s NULL:
-- states, kind, queue, keyset after %(after)s in id order, served by
-- jobs_queue_state_idx / jobs_kind_state_idx), and locked in id order;
-- `allowed` keeps the rows whose locked state allows the action; the change
-- is recorded in awa.job_actions when an operator is named; the result row
-- says how far the batch went (last_id, the next keyset bound) and why the
-- rows left alone were skipped ({"completed": 19, ...}). A job whose unique
-- key another live job holds (or an older job of the same batch being made
-- available with it) is skipped, not an error: one such row must not abort
-- a batch of thousands.
-- ---------------------------------------------------------------------------

-- fragment: bulk_batch
-- One batch of a set operation, locked: the ids given, or the next rows after
-- the keyset bound `after` among the states the action visits, filtered by
-- kind and queue.
SELECT id, state, unique_key, unique_states FROM awa.jobs
WHERE (CAST(%(ids)s AS bigint[]) IS NOT NULL AND id = ANY(CAST(%(ids)s AS bigint[])))
   OR (CAST(%(ids)s AS bigint[]) IS NULL AND id > CAST(%(after)s AS bigint)
       AND state = ANY(CAST(%(states)s AS awa.job_state[]))
       AND (CAST(%(kind)s AS text) IS NULL OR kind = CAST(%(kind)s AS text))
       AND (CAST(%(queue)s AS text) IS NULL OR queue = CAST(%(queue)s AS text)))
ORDER BY id
LIMIT %(limit)s
FOR UPDATE

-- fragment: bulk_skipped
-- Why the picked rows a batch left alone were skipped, counted by reason
-- ({"completed": 19, "unique key held": 1}), as text.
(SELECT COALESCE(jsonb_object_agg(s.reason, s.n), '{}')::text
 FROM (SELECT CASE WHEN p.state = ANY(CAST(%(allowed)s AS awa.job_state[]))
                   THEN 'unique key held' ELSE p.state::text END AS reason,
              count(*) AS n
       FROM picked AS p
       WHERE NOT EXISTS (SELECT 1 FROM changed AS c WHERE c.id = p.id)
       GROUP BY 1) AS s)

-- name: bulk_retry_jobs
-- As retry_job, over a batch.
WITH picked AS (
    /* include: bulk_batch */
), allowed AS (
    SELECT * FROM picked WHERE state = ANY(CAST(%(allowed)s AS awa.job_state[]))
), ranked AS (
    SELECT a.id, a.unique_key,
           a.unique_key IS NOT NULL AND awa.job_state_in_bitmask(a.unique_states, 'available') AS keyed,
           row_number() OVER (PARTITION BY a.unique_key ORDER BY a.id) AS nth
    FROM allowed AS a
), eligible AS (
    SELECT r.id FROM ranked AS r
    WHERE NOT r.keyed
       OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.jobs AS o
               WHERE o.unique_key = r.unique_key AND awa.job_state_in_bitmask(o.unique_states, o.state)
                 AND o.id <> r.id))
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
        heartbeat_at = NULL, deadline_at = NULL,
        callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
        callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
    FROM eligible
    WHERE j.id = eligible.id
    RETURNING j.id, j.queue
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM (SELECT DISTINCT queue FROM changed) AS q
), logged AS (
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT p.id, 'retry', CAST(%(operator)s AS text), p.state
    FROM picked AS p JOIN changed AS c ON c.id = p.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
    RETURNING job_id
)
SELECT (SELECT count(*) FROM picked) AS picked,
       (SELECT max(id) FROM picked) AS last_id,
       (SELECT count(*) FROM changed) AS changed,
       (SELECT count(*) FROM logged) AS logged,
       (SELECT count(*) FROM notified) AS notified,
       /* include: bulk_skipped */ AS skipped

-- name: bulk_cancel_jobs
-- As cancel_job, over a batch (running jobs find out at their next heartbeat).
WITH picked AS (
    /* include: bulk_batch */
), allowed AS (
    SELECT * FROM picked WHERE state = ANY(CAST(%(allowed)s AS awa.job_state[]))
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        errors = array_append(j.errors, jsonb_build_object(
            'error', format('cancelled by an operator while %%s', allowed.state),
            'type', 'AdminCancel', 'attempt', j.attempt, 'at', now())),
        callback_id = NULL, callback_timeout_at = NULL, callback_filter = NULL,
        callback_on_complete = NULL, callback_on_fail = NULL, callback_transform = NULL
    FROM allowed
    WHERE j.id = allowed.id
    RETURNING j.id, j.queue
), logged AS (
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT p.id, 'cancel', CAST(%(operator)s AS text), p.state
    FROM picked AS p JOIN changed AS c ON c.id = p.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
    RETURNING job_id
)
SELECT (SELECT count(*) FROM picked) AS picked,
       (SELECT max(id) FROM picked) AS last_id,
       (SELECT count(*) FROM changed) AS changed,
       (SELECT count(*) FROM logged) AS logged,
       0 AS notified,
       /* include: bulk_skipped */ AS skipped

-- name: bulk_run_jobs_now
-- As run_job_now, over a batch.
WITH picked AS (
    /* include: bulk_batch */
), allowed AS (
    SELECT * FROM picked WHERE state = ANY(CAST(%(allowed)s AS awa.job_state[]))
), ranked AS (
    SELECT a.id, a.unique_key,
           a.unique_key IS NOT NULL AND awa.job_state_in_bitmask(a.unique_states, 'available') AS keyed,
           row_number() OVER (PARTITION BY a.unique_key ORDER BY a.id) AS nth
    FROM allowed AS a
), eligible AS (
    SELECT r.id FROM ranked AS r
    WHERE NOT r.keyed
       OR (r.nth = 1 AND NOT EXISTS (
               SELECT 1 FROM awa.jobs AS o
               WHERE o.unique_key = r.unique_key AND awa.job_state_in_bitmask(o.unique_states, o.state)
                 AND o.id <> r.id))
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'available', run_at = now()
    FROM eligible
    WHERE j.id = eligible.id
    RETURNING j.id, j.queue
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM (SELECT DISTINCT queue FROM changed) AS q
), logged AS (
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT p.id, 'run_now', CAST(%(operator)s AS text), p.state
    FROM picked AS p JOIN changed AS c ON c.id = p.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
    RETURNING job_id
)
SELECT (SELECT count(*) FROM picked) AS picked,
       (SELECT max(id) FROM picked) AS last_id,
       (SELECT count(*) FROM changed) AS changed,
       (SELECT count(*) FROM logged) AS logged,
       (SELECT count(*) FROM notified) AS notified,
       /* include: bulk_skipped */ AS skipped

-- name: bulk_delete_jobs
-- As delete_job, over a batch (running jobs are skipped: cancel them first).
WITH picked AS (
    /* include: bulk_batch */
), allowed AS (
    SELECT * FROM picked WHERE state = ANY(CAST(%(allowed)s AS awa.job_state[]))
), changed AS (
    DELETE FROM awa.jobs AS j
    USING allowed
    WHERE j.id = allowed.id
    RETURNING j.id, j.queue
), logged AS (
    INSERT INTO awa.job_actions (job_id, action, operator, prior_state)
    SELECT p.id, 'delete', CAST(%(operator)s AS text), p.state
    FROM picked AS p JOIN changed AS c ON c.id = p.id
    WHERE CAST(%(operator)s AS text) IS NOT NULL
    RETURNING job_id
)
SELECT (SELECT count(*) FROM picked) AS picked,
       (SELECT max(id) FROM picked) AS last_id,
       (SELECT count(*) FROM changed) AS changed,
       (SELECT count(*) FROM logged) AS logged,
       0 AS notified,
       /* include: bulk_skipped */ AS skipped

-- ---------------------------------------------------------------------------
-- Receipts (awa_bridge.receipts), on the caller's connection and transaction.
-- ---------------------------------------------------------------------------

-- name: begin_receipt
-- Claim an operation key, or read the receipt already recorded for it. A
-- concurrent first attempt holding the key uncommitted makes this INSERT
-- wait; when that one commits, this statement's snapshot predates it and
-- returns no row: the caller runs it again (a new snapshot sees the receipt).
WITH inserted AS (
    INSERT INTO awa.receipts (tenant, operation_key, payload_fingerprint)
    VALUES (%(tenant)s, %(operation_key)s, CAST(%(fingerprint)s AS bytea))
    ON CONFLICT (tenant, operation_key) DO NOTHING
    RETURNING payload_fingerprint, outcome, created_at, recorded_at
)
SELECT true AS claimed, payload_fingerprint, outcome::text AS outcome, created_at, recorded_at
FROM inserted
UNION ALL
SELECT false, payload_fingerprint, outcome::text, created_at, recorded_at
FROM awa.receipts
WHERE tenant = %(tenant)s AND operation_key = %(operation_key)s AND NOT EXISTS (SELECT 1 FROM inserted)

-- name: save_receipt
-- Record the outcome of a claimed (or, after reconciliation, a pending) key.
UPDATE awa.receipts
SET outcome = CAST(%(outcome)s AS jsonb), recorded_at = now()
WHERE tenant = %(tenant)s AND operation_key = %(operation_key)s AND outcome IS NULL
RETURNING recorded_at

-- name: release_receipt
-- Reconciliation found that the provider never acted on a pending receipt:
-- forget the claim so the next attempt sends afresh. Only a pending receipt
-- with the same payload fingerprint; a recorded outcome is never released.
DELETE FROM awa.receipts
WHERE tenant = %(tenant)s AND operation_key = %(operation_key)s AND outcome IS NULL
  AND payload_fingerprint = CAST(%(fingerprint)s AS bytea)
RETURNING created_at

-- name: get_receipt
SELECT payload_fingerprint, outcome::text AS outcome, created_at, recorded_at
FROM awa.receipts
WHERE tenant = %(tenant)s AND operation_key = %(operation_key)s

-- name: prune_receipts
-- Retention: delete recorded receipts older than the window; pending ones
-- (outcome unknown) stay until someone reconciles them.
WITH deleted AS (
    DELETE FROM awa.receipts
    WHERE recorded_at IS NOT NULL AND created_at < now() - make_interval(secs => %(older_than_seconds)s)
      AND (CAST(%(tenant)s AS text) IS NULL OR tenant = %(tenant)s)
    RETURNING 1
)
SELECT count(*) AS deleted FROM deleted

-- ---------------------------------------------------------------------------
-- Admin filter choices (awa_django's admin): distinct kinds and queues by a
-- loose index scan (one probe per distinct value), never a scan of the jobs.
-- ---------------------------------------------------------------------------

-- name: list_job_kinds
WITH RECURSIVE kinds AS (
    (SELECT kind FROM awa.jobs ORDER BY kind LIMIT 1)
    UNION ALL
    SELECT (SELECT j.kind FROM awa.jobs AS j WHERE j.kind > k.kind ORDER BY j.kind LIMIT 1)
    FROM kinds AS k
    WHERE k.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL LIMIT %(limit)s

-- name: list_job_queues
WITH RECURSIVE queues AS (
    (SELECT queue FROM awa.jobs ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM awa.jobs AS j WHERE j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM queues AS q
    WHERE q.queue IS NOT NULL
)
SELECT queue FROM queues WHERE queue IS NOT NULL
UNION
SELECT queue FROM awa.queue_meta
ORDER BY 1
LIMIT %(limit)s

-- ---------------------------------------------------------------------------
-- External callbacks. A handler registers a callback (fenced by run_lease)
-- before it hands the id out, then parks the job in waiting_external. Any
-- process resolves it by id. Like the admin operations, each resolution is
-- one statement: `target` locks the job holding the id, `changed` applies
-- the resolution only while the job still awaits it (waiting_external, or
-- running when the resolution beats the handler's own return) and the wait
-- has not expired, and the final SELECT reports what was found.
-- A callback id belongs to the attempt that registered it: register_callback
-- is fenced by (id, run_lease), claim_jobs clears the id when the next attempt
-- starts, and `changed` re-checks the run_lease `target` locked. An attempt
-- that ended (retryable, failed, rescued, released) leaves its id on a job
-- that is no longer waiting_external or running, so a late or replayed
-- callback is refused (CallbackNotWaiting) until the next claim, and finds
-- nothing (CallbackNotFound) after it; nothing is changed either way.
-- ---------------------------------------------------------------------------

-- name: register_callback
UPDATE awa.jobs
SET callback_id = CAST(%(callback_id)s AS uuid),
    callback_timeout_at = now() + make_interval(secs => %(timeout_seconds)s)
WHERE /* include: attempt_fence */
RETURNING id

-- name: complete_external
WITH target AS (
    SELECT id, run_lease, state, callback_timeout_at < now() AS expired
    FROM awa.jobs WHERE callback_id = CAST(%(callback_id)s AS uuid)
    FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        callback_timeout_at = NULL,
        metadata = j.metadata || jsonb_build_object('callback_result', CAST(%(payload)s AS jsonb))
    FROM target
    WHERE j.id = target.id AND j.run_lease = target.run_lease
      AND target.state IN ('waiting_external', 'running') AND NOT target.expired
    RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt, j.max_attempts
)
SELECT target.id AS target_id, target.state::text AS prior_state, target.expired, changed.*
FROM target LEFT JOIN changed ON true

-- name: fail_external
WITH target AS (
    SELECT id, run_lease, state, callback_timeout_at < now() AS expired
    FROM awa.jobs WHERE callback_id = CAST(%(callback_id)s AS uuid)
    FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = 'failed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        callback_timeout_at = NULL,
        errors = array_append(j.errors, jsonb_build_object(
            'error', CAST(%(error)s AS text), 'type', 'CallbackFailed', 'attempt', j.attempt, 'at', now()))
    FROM target
    WHERE j.id = target.id AND j.run_lease = target.run_lease
      AND target.state IN ('waiting_external', 'running') AND NOT target.expired
    RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt, j.max_attempts
)
SELECT target.id AS target_id, target.state::text AS prior_state, target.expired, changed.*
FROM target LEFT JOIN changed ON true

-- name: retry_external
-- Runs the job again at once; the attempt that waited is spent, so with no
-- attempts left the job fails instead.
WITH target AS (
    SELECT id, run_lease, state, callback_timeout_at < now() AS expired
    FROM awa.jobs WHERE callback_id = CAST(%(callback_id)s AS uuid)
    FOR UPDATE
), changed AS (
    UPDATE awa.jobs AS j
    SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'available' END::awa.job_state,
        finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        run_at = now(), heartbeat_at = NULL, deadline_at = NULL, callback_timeout_at = NULL,
        errors = array_append(j.errors, jsonb_build_object(
            'error', 'retry requested through the callback', 'type', 'CallbackRetry',
            'attempt', j.attempt, 'at', now()))
    FROM target
    WHERE j.id = target.id AND j.run_lease = target.run_lease
      AND target.state IN ('waiting_external', 'running') AND NOT target.expired
    RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt, j.max_attempts
), notified AS (
    SELECT pg_notify('awa_jobs', queue) FROM changed WHERE state = 'available'
)
SELECT target.id AS target_id, target.state::text AS prior_state, target.expired,
       (SELECT count(*) FROM notified) AS notified, changed.*
FROM target LEFT JOIN changed ON true

-- name: rescue_callback_timeouts
-- Waits past their timeout: the attempt is spent (retryable, or failed when
-- exhausted; cancelled when a duplicate took the unique key meanwhile).
WITH expired AS (
    SELECT id,
           awa.unique_key_holder(id, unique_key, unique_states,
               CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state) AS holder
    FROM awa.jobs
    WHERE state = 'waiting_external' AND callback_timeout_at < now()
    ORDER BY callback_timeout_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET state = CASE WHEN expired.holder IS NOT NULL THEN 'cancelled'
                 WHEN j.attempt >= j.max_attempts THEN 'failed'
                 ELSE 'retryable' END::awa.job_state,
    run_at = now(),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts OR expired.holder IS NOT NULL THEN now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'error', format('callback %%s timed out (attempt %%s)', j.callback_id, j.attempt)
                 || CASE WHEN expired.holder IS NULL THEN ''
                         ELSE format('; superseded: job %%s holds its unique key', expired.holder) END,
        'type', 'CallbackTimeout', 'attempt', j.attempt, 'at', now())),
    callback_timeout_at = NULL
FROM expired
WHERE j.id = expired.id AND j.state = 'waiting_external'
RETURNING j.id, j.kind, j.queue, j.state::text AS state, j.attempt,
          j.errors[cardinality(j.errors)] ->> 'error' AS reason

-- ---------------------------------------------------------------------------
-- Priority aging: a job available for longer than the queue's aging interval
-- gains one priority level per interval waited (never above 1), so a steady
-- stream of urgent work cannot starve the rest. The original priority is kept
-- in metadata (_awa_original_priority, as Awa does) so aging stays a function
-- of the wait, however often it runs. Rows being claimed are skipped.
-- ---------------------------------------------------------------------------

-- name: age_priorities
WITH aged AS (
    SELECT id,
           COALESCE(CAST(metadata->>'_awa_original_priority' AS smallint), priority) AS original,
           GREATEST(1, COALESCE(CAST(metadata->>'_awa_original_priority' AS smallint), priority)
                       - floor(EXTRACT(EPOCH FROM now() - run_at) / CAST(%(aging_seconds)s AS float8)))::smallint AS effective
    FROM awa.jobs
    WHERE queue = %(queue)s AND state = 'available' AND priority > 1
      AND run_at <= now() - make_interval(secs => CAST(%(aging_seconds)s AS float8))
    -- In jobs_dispatch_idx order: the index hands the rows over already sorted, so even the
    -- worker pool's generic plan (which cannot see the limit) reads this index rather than the
    -- whole table for a top-N sort; without the ORDER BY it chose a Seq Scan on some samples.
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE awa.jobs AS j
SET priority = aged.effective,
    metadata = CASE WHEN j.metadata ? '_awa_original_priority' THEN j.metadata
                    ELSE j.metadata || jsonb_build_object('_awa_original_priority', aged.original) END
FROM aged
-- state::text, as the claim's re-check: compared as the enum it matches jobs_dispatch_idx's
-- predicate, and on statistics that say hardly any job is available the join read that whole
-- index (every available job of every queue) instead of the primary key.
WHERE j.id = aged.id AND j.state::text = 'available' AND aged.effective < j.priority
RETURNING j.id

-- ---------------------------------------------------------------------------
-- Job results (awa.job_results, migration v004): a value a handler stored with
-- job.set_result is inserted by the statement that completes the job, so it
-- exists exactly when the completion does. The Celery-compatible layer reads
-- it back (get_job_result), the django.tasks backend too (get_job_with_result);
-- the Celery layer may also raise max_attempts of a running attempt
-- when self.retry(max_retries=N) asks for more retries than the job was
-- enqueued with.
-- ---------------------------------------------------------------------------

-- name: complete_job_with_result
WITH done AS (
    UPDATE awa.jobs
    SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL,
        progress = COALESCE(CAST(%(progress)s AS jsonb), progress),
        metadata = metadata || CAST(%(metadata)s AS jsonb)
    WHERE /* include: attempt_fence */
    RETURNING id
), stored AS (
    INSERT INTO awa.job_results (job_id, result)
    SELECT id, CAST(%(result)s AS jsonb) FROM done
    ON CONFLICT (job_id) DO UPDATE SET result = EXCLUDED.result, created_at = now()
)
SELECT id FROM done

-- name: get_job_result
SELECT j.id, j.kind, j.queue, j.state::text AS state, j.attempt, j.max_attempts, j.args, j.metadata,
       j.errors, j.run_at, j.created_at, j.finalized_at, r.result, (r.job_id IS NOT NULL) AS has_result
FROM awa.jobs AS j
LEFT JOIN awa.job_results AS r ON r.job_id = j.id
WHERE j.id = %(id)s

-- name: get_job_with_result
-- The whole job and its stored value, json as text so every driver (Django's
-- cursor included) reads it alike: the django.tasks backend's get_result.
SELECT /* include: job_columns */, r.result::text AS result
FROM awa.jobs AS j
LEFT JOIN awa.job_results AS r ON r.job_id = j.id
WHERE j.id = %(id)s

-- name: raise_max_attempts
UPDATE awa.jobs
SET max_attempts = GREATEST(max_attempts, CAST(%(max_attempts)s AS smallint))
WHERE /* include: attempt_fence */
RETURNING max_attempts

-- name: forget_job_result
DELETE FROM awa.job_results WHERE job_id = %(id)s
RETURNING job_id

-- ---------------------------------------------------------------------------
-- Celery canvas (v007): task ids given before the job exists, chord counters,
-- and the database side of app.control.inspect(). The chord statements run
-- on the member's finalization transaction (the worker's transactional
-- path), so the counter moves exactly when the member's completion commits.
-- ---------------------------------------------------------------------------

-- name: get_job_result_by_task_id
-- AsyncResult(task_id) for a canvas task id (jobs_celery_task_id_idx); the
-- newest job wins should an id ever be sent twice.
SELECT j.id, j.kind, j.queue, j.state::text AS state, j.attempt, j.max_attempts, j.args, j.metadata,
       j.errors, j.run_at, j.created_at, j.finalized_at, r.result, (r.job_id IS NOT NULL) AS has_result
FROM awa.jobs AS j
LEFT JOIN awa.job_results AS r ON r.job_id = j.id
WHERE j.metadata ? 'celery' AND j.metadata -> 'celery' ->> 'id' = %(task_id)s
ORDER BY j.id DESC
LIMIT 1

-- name: create_chord
INSERT INTO awa.celery_chords (chord_id, size, remaining, results, callback)
VALUES (%(chord_id)s, %(size)s, %(size)s, CAST(%(results)s AS jsonb), CAST(%(callback)s AS jsonb))
RETURNING chord_id

-- name: chord_member_done
-- The row lock serializes members completing at once; the member that sees
-- remaining = 0 enqueues the callback (and then deletes the row).
UPDATE awa.celery_chords
SET remaining = remaining - 1,
    results = jsonb_set(results, ARRAY[CAST(%(index)s AS text)], CAST(%(result)s AS jsonb))
WHERE chord_id = %(chord_id)s AND remaining > 0
RETURNING remaining, results, callback

-- name: chord_member_failed
-- Only the first failing member gets the callback back (to enqueue as failed):
-- the row is gone for the members after it, failing or completing.
DELETE FROM awa.celery_chords WHERE chord_id = %(chord_id)s
RETURNING callback

-- name: delete_chord
DELETE FROM awa.celery_chords WHERE chord_id = %(chord_id)s
RETURNING chord_id

-- name: fail_chain_steps
-- The later steps of a chain whose step failed for good: never run, they are
-- recorded failed with that step's error (attempt 0), as Celery's backend marks
-- them, so AsyncResult(step id) reads FAILURE. One row per step, in awa.jobs
-- like every result, so retention removes them with the rest.
INSERT INTO awa.jobs (kind, queue, args, state, attempt, max_attempts, finalized_at, errors, metadata)
SELECT s.kind, s.queue, s.args, 'failed', 0, 1, now(),
       ARRAY[s.error || jsonb_build_object('at', now())], s.metadata
FROM jsonb_to_recordset(CAST(%(steps)s AS jsonb)) AS s(kind text, queue text, args jsonb, error jsonb, metadata jsonb)
RETURNING id

-- name: save_group_result
-- GroupResult.save(): the member ids kept as the result of one completed row
-- of kind celery.group, found by Celery's backend key (celery-taskset-meta-<id>)
-- in metadata.celery.id (jobs_celery_task_id_idx); it expires with the other
-- finished jobs (retention). Saving again replaces the row.
WITH gone AS (
    DELETE FROM awa.jobs
    WHERE metadata ? 'celery' AND metadata -> 'celery' ->> 'id' = %(key)s AND kind = 'celery.group'
), saved AS (
    INSERT INTO awa.jobs (kind, state, attempt, max_attempts, finalized_at, metadata)
    VALUES ('celery.group', 'completed', 0, 1, now(),
            jsonb_build_object('celery', jsonb_build_object('id', CAST(%(key)s AS text))))
    RETURNING id
)
INSERT INTO awa.job_results (job_id, result)
SELECT id, CAST(%(ids)s AS jsonb) FROM saved
RETURNING job_id

-- name: restore_group_result
SELECT r.result
FROM awa.jobs AS j
JOIN awa.job_results AS r ON r.job_id = j.id
WHERE j.metadata ? 'celery' AND j.metadata -> 'celery' ->> 'id' = %(key)s AND j.kind = 'celery.group'
ORDER BY j.id DESC
LIMIT 1

-- name: delete_group_result
DELETE FROM awa.jobs
WHERE metadata ? 'celery' AND metadata -> 'celery' ->> 'id' = %(key)s AND kind = 'celery.group'
RETURNING id

-- name: celery_jobs_in_states
-- app.control.inspect(): the jobs of the app's task names in some states.
SELECT id, kind, queue, state::text AS state, args, metadata, priority, attempt, run_at, attempted_at
FROM awa.jobs
WHERE kind = ANY(CAST(%(kinds)s AS text[])) AND state = ANY(CAST(%(states)s AS awa.job_state[]))
ORDER BY run_at, id
LIMIT %(limit)s

-- name: terminate_backend
-- Ends the server process of a connection the client dropped in an unknown
-- state (Client.insert cancelled mid-statement), so a statement still running
-- there cannot commit after its caller gave up.
SELECT pg_terminate_backend(%(pid)s) AS terminated
