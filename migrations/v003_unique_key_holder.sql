-- v003: let maintenance move a job without tripping over its own unique key.
--
-- A unique job whose mask does not enforce 'running' gives up its key while
-- it runs, so a duplicate may be inserted meanwhile. If its worker dies, the
-- rescue to 'retryable' (or a promotion to 'available') would collide with
-- the duplicate (SQLSTATE 23505) and abort the whole maintenance batch, every
-- tick. Maintenance asks this function first: the id of another job holding
-- the key in a state its own mask enforces, when moving job p_id to p_target
-- would need the key; NULL otherwise. That job supersedes p_id, which is
-- cancelled instead (RELIABILITY.md R30).

CREATE FUNCTION awa.unique_key_holder(
    p_id bigint, p_unique_key bytea, p_unique_states bit(8), p_target awa.job_state
) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT o.id
    FROM awa.jobs AS o
    WHERE p_unique_key IS NOT NULL
      AND awa.job_state_in_bitmask(p_unique_states, p_target)
      AND o.unique_key = p_unique_key
      AND awa.job_state_in_bitmask(o.unique_states, o.state)
      AND o.id <> p_id
    LIMIT 1
$$;
