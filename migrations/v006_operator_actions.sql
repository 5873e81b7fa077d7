-- v006: what operators did to jobs (the job timeline's "who did what") and
-- where each cron schedule comes from.
--
-- awa.job_actions: one row per job an operator retried, cancelled, ran now or
-- deleted (admin, CLI, awa_bridge.admin with an operator name), written by the
-- same statement that changes the job. No foreign key to awa.jobs: the
-- record of a deletion outlives the job, and retention cleanup of millions of
-- finished jobs pays no per-row check.
CREATE TABLE awa.job_actions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint        NOT NULL,
    action      text          NOT NULL,
    operator    text          NOT NULL,
    prior_state awa.job_state NOT NULL,
    at          timestamptz   NOT NULL DEFAULT now(),

    CONSTRAINT job_actions_action_check CHECK (action IN ('retry', 'cancel', 'run_now', 'delete'))
);
CREATE INDEX job_actions_job_idx ON awa.job_actions (job_id, at);
CREATE INDEX job_actions_at_idx ON awa.job_actions (at);

-- awa.cron_job_sources: 'declared' schedules come from settings or code and
-- are owned by the declaration set of `owner` (a worker that starts with a
-- declaration set deletes the declared schedules of its owner it no longer
-- declares); 'database' schedules were created by an operator and are never
-- touched by a worker. Kept beside awa.cron_jobs, whose columns are fixed by
-- the shared contract. Every schedule that exists now was declared by the
-- default owner (there was no other way to create one before this migration).
CREATE TABLE awa.cron_job_sources (
    name   text NOT NULL PRIMARY KEY REFERENCES awa.cron_jobs (name) ON DELETE CASCADE,
    source text NOT NULL,
    owner  text,

    CONSTRAINT cron_job_sources_source_check CHECK (source IN ('declared', 'database')),
    CONSTRAINT cron_job_sources_owner_check CHECK ((source = 'declared') = (owner IS NOT NULL))
);
INSERT INTO awa.cron_job_sources (name, source, owner) SELECT name, 'declared', 'default' FROM awa.cron_jobs;
