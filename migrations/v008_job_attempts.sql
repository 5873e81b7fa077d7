-- v008: who ran each attempt of a job, and its snoozes (the job timeline).
--
-- awa.job_attempts: one row per claim, written by the claim statement itself
-- (no extra round trip): the attempt's run_lease, the worker process that
-- claimed it ("host/pid" and its runtime registry id, which outlives the
-- registry row) and when. A snooze ends an attempt without spending it: the
-- worker's finish statement stamps snoozed_at / snoozed_until on the row of
-- that run_lease, and a worker shutting down stamps released_at on the rows of
-- the attempts it hands back unspent. Beside awa.jobs, whose columns are fixed by the shared
-- contract. No foreign key, like awa.job_actions: the retention cleanup
-- deletes a finished job's attempts in the statement that deletes the job,
-- and the leader's history retention (WorkerConfig.action_retention) deletes
-- rows older than it whatever became of their job.
CREATE TABLE awa.job_attempts (
    job_id        bigint      NOT NULL,
    run_lease     bigint      NOT NULL,
    attempt       smallint    NOT NULL,
    instance_id   uuid        NOT NULL,
    worker        text        NOT NULL,
    started_at    timestamptz NOT NULL,
    snoozed_at    timestamptz,
    snoozed_until timestamptz,
    released_at   timestamptz,
    PRIMARY KEY (job_id, run_lease)
);
CREATE INDEX job_attempts_started_idx ON awa.job_attempts (started_at);
