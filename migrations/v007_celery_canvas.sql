-- v007: what the Celery-compatible layer's canvas (chain, group, chord) needs.
--
-- Canvas tasks get their ids before their jobs exist (a chain's later steps
-- are enqueued only when the step before them completes), as Celery's
-- signatures are "frozen" with a task id. The id is kept in the job's
-- metadata (metadata -> 'celery' ->> 'id'); this partial index finds a job by
-- it, for AsyncResult(task_id). Jobs without Celery metadata stay out of it,
-- so plain awa jobs pay nothing.
CREATE INDEX jobs_celery_task_id_idx ON awa.jobs ((metadata -> 'celery' ->> 'id'))
    WHERE metadata ? 'celery';

-- One row per chord that has not fired yet: how many header members are
-- still to complete, their results in group order, and the callback to
-- enqueue. A member's completion decrements the counter in the SAME
-- transaction that marks the member completed (fenced by its run_lease), and
-- the member that brings it to zero enqueues the callback in that transaction
-- too and deletes the row: the callback is enqueued exactly once, whatever
-- worker dies when. The first member that fails for good deletes the row and
-- enqueues the callback to fail with ChordError instead of running; the
-- members after it find no row.
CREATE TABLE awa.celery_chords (
    chord_id   text        PRIMARY KEY,
    size       integer     NOT NULL CHECK (size > 0),
    remaining  integer     NOT NULL CHECK (remaining >= 0),
    results    jsonb       NOT NULL,
    callback   jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE awa.celery_chords IS
    'Pending chords of the Celery-compatible layer: a counter and the results of the header, the callback to enqueue.';
