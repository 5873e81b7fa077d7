-- v004: return values of jobs, kept beside the job and deleted with it.
--
-- A handler that calls job.set_result(value) (the Celery-compatible layer
-- does for every task that returns something, unless ignore_result) gets one
-- row here, inserted by the same statement that marks the job completed
-- (query complete_job_with_result): the value exists exactly when the
-- completion does. The row lives as long as its job: retention cleanup and
-- admin deletes take it along (ON DELETE CASCADE).

CREATE TABLE awa.job_results (
    job_id     bigint      PRIMARY KEY REFERENCES awa.jobs (id) ON DELETE CASCADE,
    result     jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE awa.job_results IS
    'Return values of completed jobs (awa_bridge job.set_result / Celery-compatible tasks); deleted with the job.';
