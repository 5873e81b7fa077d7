-- v011: fewer index entries per job on the hot path; retention by range.
--
-- Every claim is a non-HOT update of the job's row (its state changes), so
-- each index whose predicate the running row satisfies gets an entry per
-- claim. jobs_deadline_idx was one of them, read only by the deadline rescue
-- (every rescue interval); that rescue now reads the running jobs through
-- jobs_heartbeat_idx (the same rows: state = 'running', as many as the
-- workers' slots) and filters on deadline_at. On a drain of no-op jobs the
-- claim's index insertions were about a third of the server's work per job.
--
-- jobs_finalized_idx is keyed (state, finalized_at): retention deletes the
-- completed jobs past their window, and separately the failed and cancelled
-- ones past theirs, each a range of the index, never passing over rows of
-- the other kind (a long failed retention kept failed rows in the way of
-- every completed batch); "completed in the last hour" is a range too.
DROP INDEX awa.jobs_deadline_idx;

DROP INDEX awa.jobs_finalized_idx;
CREATE INDEX jobs_finalized_idx ON awa.jobs (state, finalized_at)
    WHERE state IN ('completed', 'failed', 'cancelled');
