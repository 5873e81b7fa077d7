-- v009: the worker's claims recorded per claim statement, not per job.
--
-- v008 wrote one awa.job_attempts row per claimed job in the claim statement;
-- on a drain of no-op jobs that row was a fifth of the server's work per job.
-- Now the claim statement writes one awa.job_claims row per claim (the worker
-- process, when, and the ids it claimed: its attempted_at equals claimed_at, the
-- same transaction's now()), and an attempt gets its own awa.job_attempts row
-- only when it ends some other way than the batched completion: a retry, a
-- failure, a snooze, a wait for a callback, a rescue, a hand-back at shutdown.
-- The job timeline reads both: the attempts' own rows, and for the latest
-- attempt without one (running, or completed) the claim that started it.
--
-- A claim row is deleted by the leader (PruneClaims) once no job still has it
-- as its latest attempt without a row of its own: once its completed jobs are
-- gone by retention, and the others moved on to a later attempt.
CREATE TABLE awa.job_claims (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    claimed_at  timestamptz NOT NULL,
    instance_id uuid        NOT NULL,
    worker      text        NOT NULL,
    job_ids     bigint[]    NOT NULL
);
CREATE INDEX job_claims_claimed_at_idx ON awa.job_claims (claimed_at);
