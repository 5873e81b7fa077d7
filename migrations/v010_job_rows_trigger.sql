-- v010: a job's own rows are deleted with it by one statement-level trigger.
--
-- awa.job_results and awa.job_ordering_keys referenced awa.jobs with
-- ON DELETE CASCADE: PostgreSQL runs each cascade as a trigger per deleted job,
-- two per row, which made retention cleanup delete about 55,000-70,000 jobs/s
-- where the same DELETE without them runs at 175,000-250,000/s (batches of
-- 10,000 on a 2-core machine). The foreign keys go; an AFTER DELETE trigger on
-- awa.jobs, once per statement, deletes the rows of every job the statement
-- deleted from the three tables that hold rows per job (its result, its
-- ordering key, its attempt records), whatever deleted it: retention, an
-- operator, a hand-written DELETE. Those rows are only ever inserted for a job
-- that exists, by the statement that completes it (results), the function that
-- inserts it (ordering keys) or the one that ends an attempt (attempt records).
ALTER TABLE awa.job_results DROP CONSTRAINT job_results_job_id_fkey;
ALTER TABLE awa.job_ordering_keys DROP CONSTRAINT job_ordering_keys_job_id_fkey;

CREATE FUNCTION awa.delete_job_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM awa.job_results AS r USING deleted_jobs AS d WHERE r.job_id = d.id;
    DELETE FROM awa.job_ordering_keys AS o USING deleted_jobs AS d WHERE o.job_id = d.id;
    DELETE FROM awa.job_attempts AS a USING deleted_jobs AS d WHERE a.job_id = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_delete_job_rows
    AFTER DELETE ON awa.jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION awa.delete_job_rows();
