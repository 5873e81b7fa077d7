-- v005: what running workers say about themselves, the maintenance leader's
-- lease, and per-minute outcome counters.
--
-- awa.runtime_instances: one row per live worker process, written by the
-- process itself (insert at start, refresh every heartbeat interval, delete at
-- a clean shutdown) and pruned by the maintenance leader once a row is older
-- than the heartbeat staleness window (the process died without saying so).
-- The admin's workers page reads it; nothing about a job depends on it.
CREATE TABLE awa.runtime_instances (
    instance_id  uuid        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    version      text        NOT NULL,
    -- [{"name": "email", "max_workers": 20, "running": 3}, ...]
    queues       jsonb       NOT NULL DEFAULT '[]',
    jobs_held    integer     NOT NULL DEFAULT 0,
    is_leader    boolean     NOT NULL DEFAULT false,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runtime_instances_heartbeat_idx ON awa.runtime_instances (heartbeat_at);

-- The maintenance leader holds a lease it renews in the database; a holder
-- that stops renewing (dead, frozen, blocked) loses it when expires_at passes
-- and another process takes it over. epoch grows at every change of holder,
-- so a former leader's late writes can be told apart.
CREATE TABLE awa.maintenance_lease (
    name        text        PRIMARY KEY,
    holder      uuid        NOT NULL,
    epoch       bigint      NOT NULL DEFAULT 1,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    renewed_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- Outcome counters per queue and minute, kept by the workers (added up in
-- memory, written in one upsert every few seconds) so dashboards never scan
-- awa.jobs. Rows older than the longest chart window are deleted by the leader.
CREATE TABLE awa.queue_rollups (
    queue     text        NOT NULL,
    minute    timestamptz NOT NULL,
    completed bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    retried   bigint      NOT NULL DEFAULT 0,
    cancelled bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);
CREATE INDEX queue_rollups_minute_idx ON awa.queue_rollups (minute);
