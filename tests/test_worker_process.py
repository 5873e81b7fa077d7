"""The worker as a real process: CLI, SIGTERM drain, SIGKILL recovery, poison crash, two workers, leader failover.

Scenarios R5 (across processes), R10, R13, R15, R20, R21 and R29 of
docs/reliability.md, plus two regressions (a row lock stalling every heartbeat;
a runtime failure on the last attempt wedging the queue), run against
``python -m awa_bridge worker tests.worker_app:client`` subprocesses with
short timings (heartbeat 50 ms, staleness 250 ms, rescue every 100 ms). Real
signals, a real PostgreSQL, and a ledger table written by the handlers;
every wait polls the database.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.worker.client import EXIT_GRACE
from awa_bridge.worker.runtime import CANCEL_GRACE, POOL_CLOSE_TIMEOUT

from .procs import Probe, Workers, scaled, unique_queue, wait_for

STALENESS = 0.25
RESCUE_INTERVAL = 0.1
ELECTION_INTERVAL = 0.2


def enqueue(url: str, kind: str, queue: str, count: int = 1, **opts: Any) -> list[int]:
    """Insert ``count`` jobs of one kind in one transaction; their ids."""
    with psycopg.connect(url) as conn:
        ids = [awa_bridge.insert_job_sync(conn, {"n": i}, kind=kind, queue=queue, **opts).id for i in range(count)]
        conn.commit()
    return ids


def job(probe: Probe, job_id: int) -> dict[str, Any]:
    cur = probe._connection().execute(
        "SELECT state::text AS state, attempt, run_lease, heartbeat_at, attempted_at, run_at, "
        "cardinality(errors) AS n_errors, errors[1] AS first_error FROM awa.jobs WHERE id = %s",
        (job_id,),
    )
    names = [c.name for c in cur.description or []]
    row = cur.fetchone()
    assert row is not None, f"job {job_id} is gone"
    return dict(zip(names, row, strict=True))


def retried_after(probe: Probe, job_id: int) -> float:
    """Seconds from the first execution's ledger row to the last one's."""
    return float(probe.value("SELECT extract(epoch FROM max(at) - min(at)) FROM t_ledger WHERE job_id = %s", (job_id,)))


def ledger(probe: Probe, job_id: int) -> list[tuple[int, int, str]]:
    """(attempt, run_lease, worker) per execution, in order."""
    return [
        (a, lease, w)
        for a, lease, w in probe.rows(
            "SELECT attempt, run_lease, worker FROM t_ledger WHERE job_id = %s ORDER BY at, attempt", (job_id,)
        )
    ]


def count_in(probe: Probe, ids: list[int], state: str) -> int:
    return int(probe.value("SELECT count(*) FROM awa.jobs WHERE id = ANY(%s) AND state::text = %s", (ids, state)))


def running_with_heartbeat(probe: Probe, job_id: int) -> bool:
    row = job(probe, job_id)
    return row["state"] == "running" and row["heartbeat_at"] is not None and bool(ledger(probe, job_id))


# -- E. shutdown -------------------------------------------------------------------


def test_cli_worker_completes_jobs_and_drains_in_flight_work_on_sigterm(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """R20: stop claiming at SIGTERM, keep heartbeating the 3 running jobs, finish them, exit 0."""
    queue = unique_queue()
    worker = workers.start(f"{queue}:3", env={"AWA_SLOW_SECONDS": "2"}).wait_started()
    assert worker.logged(f"queues {queue} (3 workers)")

    first = enqueue(app_db, "ledger", queue, 2)
    wait_for(lambda: count_in(probe, first, "completed") == 2, 10, "the first jobs to complete")

    slow = enqueue(app_db, "slow", queue, 3)
    wait_for(lambda: count_in(probe, slow, "running") == 3, 10, "3 slow jobs running")
    # Every slot is busy: these wait (their NOTIFY wakes a producer with no free slot).
    waiting = enqueue(app_db, "ledger", queue, 3)
    signal_at = probe.now()
    worker.signal(signal.SIGTERM)

    beats: set[Any] = set()

    def exited() -> bool:
        rows = probe.rows("SELECT heartbeat_at FROM awa.jobs WHERE id = ANY(%s) AND state = 'running'", (slow,))
        beats.update(r[0] for r in rows if r[0] is not None and r[0] > signal_at)
        return not worker.alive()

    wait_for(exited, 10, "the worker to drain and exit", interval=0.02)
    assert worker.wait(5) == 0
    assert worker.logged("received SIGTERM: shutting down gracefully")
    assert worker.logged("draining 3 running job(s)")
    assert worker.logged("worker stopped")

    assert count_in(probe, slow, "completed") == 3
    assert sorted(a for a, _, _ in (e for i in slow for e in ledger(probe, i))) == [1, 1, 1]
    # Heartbeats kept advancing while the drain ran.
    assert len(beats) >= 3, beats
    # No claim after stop-claim: the queued jobs were never touched.
    assert count_in(probe, waiting, "available") == 3
    assert probe.value("SELECT max(attempt) FROM awa.jobs WHERE id = ANY(%s)", (waiting,)) == 0
    last_claim = probe.value("SELECT max(attempted_at) FROM awa.jobs WHERE queue = %s", (queue,))
    assert last_claim < signal_at


def test_a_cli_worker_tunes_its_garbage_collector(app_db: str, probe: Probe, workers: Workers) -> None:
    """``python -m awa_bridge worker`` (Client.run) freezes what the app loaded and collects less often."""
    from awa_bridge.worker.gctuning import YOUNG_THRESHOLD

    queue = unique_queue()
    workers.start(queue).wait_started()
    [job_id] = enqueue(app_db, "gc_state", queue, 1)
    wait_for(lambda: count_in(probe, [job_id], "completed") == 1, 10, "the job to complete")
    metadata = probe.value("SELECT metadata FROM awa.jobs WHERE id = %s", (job_id,))
    assert metadata["gc_threshold"][0] == YOUNG_THRESHOLD, metadata
    assert metadata["gc_frozen"] > 1000, metadata  # the interpreter's, the app's and the driver's objects


@pytest.mark.parametrize(
    ("setting", "expected"), [(None, "asyncio.unix_events"), ("uvloop", "uvloop.Loop"), ("auto", "uvloop.Loop")]
)
def test_a_cli_worker_runs_on_the_event_loop_its_config_names(
    app_db: str, probe: Probe, workers: Workers, setting: str | None, expected: str
) -> None:
    """``python -m awa_bridge worker`` runs on asyncio's own loop by default, on uvloop with
    ``event_loop="uvloop"`` or ``"auto"`` (the dev extra installs it); the log says which."""
    queue = unique_queue()
    env = {"AWA_EVENT_LOOP": setting} if setting else {}
    worker = workers.start(queue, env=env).wait_started()
    [job_id] = enqueue(app_db, "loop_state", queue, 1)
    wait_for(lambda: count_in(probe, [job_id], "completed") == 1, 10, "the job to complete")
    metadata = probe.value("SELECT metadata FROM awa.jobs WHERE id = %s", (job_id,))
    assert metadata["event_loop"].startswith(expected), metadata
    assert worker.logged(f"event loop: {expected}")


DRAIN_TIMEOUT = 0.5


@pytest.mark.parametrize(
    ("kind", "bound", "said"),
    [
        # A handler longer than the drain timeout (it stops once told: job.cancelled).
        ("hang", DRAIN_TIMEOUT, ()),
        # Stuck code: an async handler that catches CancelledError and goes on is left running
        # CANCEL_GRACE after its cancellation (before: the process stayed up as long as it ran, 60 s).
        # The runtime says so, and the loop's teardown, which leaves it too, names its job.
        (
            "deaf",
            DRAIN_TIMEOUT + CANCEL_GRACE + POOL_CLOSE_TIMEOUT + EXIT_GRACE,
            ("job(s) {job}: the handler still runs", "after their cancellation (awa job {job})"),
        ),
    ],
)
def test_drain_timeout_releases_the_unfinished_job_for_another_worker(
    app_db: str, probe: Probe, workers: Workers, kind: str, bound: float, said: tuple[str, ...]
) -> None:
    """R21: a handler still running at the drain timeout is released (attempt given back) and the
    process exits 0, also when the handler does not stop."""
    queue = unique_queue()
    a = workers.start(queue, name="a", env={"AWA_DRAIN_TIMEOUT": str(DRAIN_TIMEOUT)}).wait_started()
    [job_id] = enqueue(app_db, kind, queue)
    wait_for(lambda: running_with_heartbeat(probe, job_id), 10, f"the {kind} job to run")

    started = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait(40) == 0
    assert time.monotonic() - started < scaled(bound + 4), "the worker overstayed its drain timeout"
    assert a.logged("released 1 unfinished job(s)")
    for text in said:
        assert a.logged(text.format(job=job_id)), a.output
    row = job(probe, job_id)
    assert (row["state"], row["attempt"], row["run_lease"], row["n_errors"]) == ("available", 0, 1, 0)

    workers.start(queue, name="b", env={"AWA_HANG_UNTIL_ATTEMPT": "1"}).wait_started()
    wait_for(lambda: job(probe, job_id)["state"] == "completed", 10, "worker b to run the released job")
    row = job(probe, job_id)
    assert (row["attempt"], row["run_lease"], row["n_errors"]) == (1, 2, 0)
    assert ledger(probe, job_id) == [(1, 1, "a"), (1, 2, "b")]


def test_a_sync_handler_told_to_stop_at_the_drain_timeout_finishes_its_clean_up(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """A released sync handler sees job.cancelled: its thread gets what is left of the grace to return,
    so the clean-up it does then is not cut off by the process exiting."""
    queue = unique_queue()
    env = {"AWA_DRAIN_TIMEOUT": str(DRAIN_TIMEOUT), "AWA_HANG_CLEANUP_SECONDS": "1"}
    a = workers.start(queue, name="a", env=env).wait_started()
    [job_id] = enqueue(app_db, "hang", queue)
    wait_for(lambda: running_with_heartbeat(probe, job_id), 10, "the hang job to run")
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.output
    assert ledger(probe, job_id) == [(1, 1, "a"), (1, 1, "a:cleaned-up")]
    assert not a.logged("the handler still runs"), a.output
    assert job(probe, job_id)["state"] == "available"  # released, its attempt given back


def test_a_second_sigterm_releases_the_running_jobs_at_once(app_db: str, probe: Probe, workers: Workers) -> None:
    """The first SIGTERM drains for drain_timeout (here 60 s); the second one does not wait for it."""
    queue = unique_queue()
    a = workers.start(queue, name="a", env={"AWA_DRAIN_TIMEOUT": "60"}).wait_started()
    [job_id] = enqueue(app_db, "hang", queue)
    wait_for(lambda: running_with_heartbeat(probe, job_id), 10, "the hang job to run")
    a.signal(signal.SIGTERM)
    a.wait_log("draining 1 running job(s) for up to 60.0 s")
    assert a.logged("send SIGTERM again to release them now")
    # The maintenance leader stepped down before the drain: a draining worker fires no schedules.
    assert probe.value("SELECT count(*) FROM awa.maintenance_lease WHERE expires_at > now()") == 0
    time.sleep(0.5)
    assert a.alive()
    started = time.monotonic()
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.output
    assert time.monotonic() - started < scaled(5), "the second SIGTERM waited for the drain"
    assert a.logged("received SIGTERM again: releasing the running jobs now")
    row = job(probe, job_id)
    assert (row["state"], row["attempt"]) == ("available", 0)


def test_process_children_ignore_a_sigint_sent_to_the_whole_group(app_db: str, probe: Probe, workers: Workers) -> None:
    """Ctrl-C in a terminal reaches every process of the group: the children of the process executor
    leave it to the worker, which drains: the running attempt finishes, idle children print nothing."""
    queue = unique_queue()
    worker = workers.start(f"{queue}:3:executor=process", env={"AWA_BLOCK_SECONDS": "2"}).wait_started()
    [job_id] = enqueue(app_db, "block_sync", queue)
    wait_for(lambda: len(ledger(probe, job_id)) == 1, 30, "the job to start in a child")
    worker.signal_group(signal.SIGINT)
    assert worker.wait(30) == 0, worker.output
    row = job(probe, job_id)
    assert (row["state"], row["attempt"], row["n_errors"]) == ("completed", 1, 0), worker.output
    assert worker.logged("received SIGINT: shutting down gracefully")
    assert not worker.logged("KeyboardInterrupt") and not worker.logged("Traceback"), worker.output


def test_client_run_in_a_script_without_logging_set_up_shows_the_workers_log(app_db: str, tmp_path: Any) -> None:
    """``client.run()`` from a plain script (docs/howto/cron.md's way) said nothing at all, not even
    which schedules it deleted: with no logging set up, awa_bridge's log goes to stderr at INFO."""
    import os
    import subprocess
    import sys

    script = tmp_path / "jobs.py"
    script.write_text(
        "from awa_bridge.worker import Client\n"
        "client = Client()\n"
        "@client.task('noop_kind')\n"
        "def noop(job):\n"
        "    pass\n"
        "client.run(['scripted'])\n"
    )
    env = {**os.environ, "DATABASE_URL": app_db, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "worker started" in line:
                break
        proc.send_signal(signal.SIGTERM)
        lines += proc.stderr.readlines()  # to the end: the process has exited
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert proc.returncode == 0, "".join(lines)
    assert any(" INFO awa_bridge.worker: worker started" in line for line in lines), lines
    assert "worker stopped" in lines[-1], lines


# -- C. crash recovery --------------------------------------------------------------


def test_sigkill_mid_job_is_rescued_and_finished_by_another_worker(app_db: str, probe: Probe, workers: Workers) -> None:
    """R10, real timing: the killed attempt's heartbeat goes stale, the survivor rescues and runs attempt 2."""
    queue = unique_queue()
    a = workers.start(queue, name="a").wait_started()
    [job_id] = enqueue(app_db, "hang", queue)
    wait_for(lambda: running_with_heartbeat(probe, job_id), 10, "the hang job to run on a")
    workers.start(queue, name="b").wait_started()

    killed_at = probe.now()
    a.kill()
    wait_for(lambda: job(probe, job_id)["state"] == "completed", 15, "the job to be rescued and completed")

    row = job(probe, job_id)
    assert (row["attempt"], row["run_lease"], row["n_errors"]) == (2, 2, 1)
    error = row["first_error"]
    assert error["type"] == "HeartbeatStale" and "heartbeat stale" in error["error"], error
    assert ledger(probe, job_id) == [(1, 1, "a"), (2, 2, "b")]
    rescued_after = probe.value(
        "SELECT (%s::jsonb->>'at')::timestamptz - %s", (psycopg.types.json.Jsonb(error), killed_at)
    )
    # b must first win the leader lock (one election interval), then the heartbeat must go stale.
    bound = timedelta(seconds=STALENESS + RESCUE_INTERVAL + ELECTION_INTERVAL + scaled(1.5))
    assert rescued_after <= bound, f"rescued {rescued_after} after the kill (bound {bound})"


def test_kill_between_handler_return_and_completion_flush(app_db: str, probe: Probe, workers: Workers) -> None:
    """R13: the handler returned and its ledger row committed, but the batched completion never flushed."""
    queue = unique_queue()
    a = workers.start(queue, name="a", env={"AWA_COMPLETION_FLUSH": "3"}).wait_started()
    [job_id] = enqueue(app_db, "ledger", queue)
    wait_for(lambda: ledger(probe, job_id), 10, "the handler's ledger row")
    assert job(probe, job_id)["state"] == "running", "the completion was flushed before the kill"
    a.kill()

    workers.start(queue, name="b").wait_started()
    wait_for(lambda: job(probe, job_id)["state"] == "completed", 15, "the job to be rescued and re-run")
    row = job(probe, job_id)
    assert (row["attempt"], row["run_lease"], row["n_errors"]) == (2, 2, 1)
    assert row["first_error"]["type"] == "HeartbeatStale"
    assert ledger(probe, job_id) == [(1, 1, "a"), (2, 2, "b")]


def test_poison_crash_job_fails_after_max_attempts_while_other_jobs_complete(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """R15: a handler that kills its process on every attempt is bounded by rescue spending attempts."""
    queue = unique_queue()
    [poison] = enqueue(app_db, "crash", queue, max_attempts=3)
    others = enqueue(app_db, "ledger", queue, 10)
    crashed: list[int | None] = []
    current = [workers.start(f"{queue}:2", name="w0")]

    def supervise() -> bool:
        if not current[0].alive():
            crashed.append(current[0].returncode)
            current[0] = workers.start(f"{queue}:2", name=f"w{len(crashed)}")
        return job(probe, poison)["state"] == "failed" and count_in(probe, others, "completed") == len(others)

    wait_for(supervise, 60, "the poison job to fail and the others to complete", interval=0.05)
    assert crashed == [1, 1, 1]

    # Watch a while longer (enough for several rescue ticks): no further attempt, no further crash.
    more = enqueue(app_db, "ledger", queue, 3)
    wait_for(
        lambda: (
            supervise()
            and count_in(probe, more, "completed") == 3
            and probe.value(
                "SELECT now() - finalized_at > %s FROM awa.jobs WHERE id = %s",
                (timedelta(seconds=STALENESS + 5 * RESCUE_INTERVAL), poison),
            )
        ),
        15,
        "an observation window after the failure",
    )
    assert crashed == [1, 1, 1] and current[0].alive()
    row = job(probe, poison)
    assert (row["state"], row["attempt"], row["n_errors"]) == ("failed", 3, 3)
    kinds = probe.value(
        "SELECT array_agg(e->>'type' ORDER BY (e->>'attempt')::int) FROM awa.jobs, unnest(errors) AS e WHERE id = %s",
        (poison,),
    )
    assert kinds == ["HeartbeatStale"] * 3
    assert [a for a, _, _ in ledger(probe, poison)] == [1, 2, 3]


def test_a_locked_job_row_does_not_stall_the_heartbeats_of_the_others(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """One held row stays locked (a finalization, a rescue or an operator's transaction) for 4 staleness windows.

    Regression: the heartbeat was one batched UPDATE that waited for that lock,
    so every other job of the batch went stale and was rescued while running
    (and it deadlocked with the worker's own batched completion).
    """
    queue = unique_queue()
    workers.start(f"{queue}:2", name="w").wait_started()
    locked, other = enqueue(app_db, "hang", queue, 2)
    wait_for(lambda: all(running_with_heartbeat(probe, i) for i in (locked, other)), 10, "both jobs to run")
    beats: set[Any] = set()
    with psycopg.connect(app_db, application_name="test-locker") as locker:
        locker.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", (locked,))
        locked_at = probe.now()

        def watched() -> bool:
            row = job(probe, other)
            assert (row["state"], row["attempt"], row["n_errors"]) == ("running", 1, 0), row
            beats.add(row["heartbeat_at"])
            return bool(
                probe.value("SELECT clock_timestamp() - %s > %s", (locked_at, timedelta(seconds=4 * STALENESS)))
            )

        wait_for(watched, 10, "four staleness windows under the lock")
        assert len(beats) >= 5, f"the other job's heartbeat advanced only {len(beats)} times"
        locker.rollback()


def test_connection_lost_on_the_last_attempt_fails_the_job_and_not_the_queue(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """A transactional handler whose connection dies is retried only while attempts remain.

    Regression: the runtime-failure path made the job retryable even on its
    last attempt; the next claim then pushed attempt past max_attempts, the
    CHECK on attempt failed, and every later claim on the queue failed with it.
    """
    queue = unique_queue()
    worker = workers.start(queue, name="w").wait_started()
    [lost] = enqueue(app_db, "tx_lost_connection", queue, max_attempts=2)
    wait_for(lambda: job(probe, lost)["state"] in ("failed", "completed"), 15, "the job to be exhausted")
    row = job(probe, lost)
    assert (row["state"], row["attempt"], row["n_errors"]) == ("failed", 2, 2)
    assert row["first_error"]["type"] == "AdminShutdown"
    assert [a for a, _, _ in ledger(probe, lost)] == [1, 2]
    assert retried_after(probe, lost) >= 2.0  # the attempt's own backoff, not the runtime path's 1 s
    assert not worker.logged("attempt failed inside the worker")

    [after] = enqueue(app_db, "ledger", queue)
    wait_for(lambda: job(probe, after)["state"] == "completed", 10, "the queue to keep working")
    assert not worker.logged("violates check constraint")


def test_a_completion_effect_whose_connection_dies_retries_the_job_with_its_backoff(
    app_db: str, probe: Probe, workers: Workers
) -> None:
    """``job.on_complete``'s transaction loses its connection before it commits: nothing of it
    committed, so the job is retried on its own backoff with the connection error recorded, and
    the effect commits once, with the second attempt's completion. Regression: the lost connection
    went up as a failure of the worker itself (a traceback, a fixed 1 s retry)."""
    queue = unique_queue()
    worker = workers.start(queue, name="w").wait_started()
    [lost] = enqueue(app_db, "effect_lost_connection", queue, max_attempts=3)
    wait_for(lambda: job(probe, lost)["state"] in ("failed", "completed"), 30, "the job to be retried and complete")
    row = job(probe, lost)
    assert (row["state"], row["attempt"], row["n_errors"]) == ("completed", 2, 1)
    assert row["first_error"]["type"] == "AdminShutdown"
    assert [a for a, _, _ in ledger(probe, lost)] == [1, 2]
    assert probe.value("SELECT count(*) FROM t_effects WHERE job_id = %s", (lost,)) == 1
    assert retried_after(probe, lost) >= 2.0  # backoff_seconds(1): 2 to 2.5 s; the runtime path's retry was 1 s
    assert not worker.logged("attempt failed inside the worker") and not worker.logged("Traceback")


# -- B. claims across processes ---------------------------------------------------------


def test_two_worker_processes_run_every_job_exactly_once(app_db: str, probe: Probe, workers: Workers) -> None:
    """R5 across processes: 1000 jobs, two workers, no faults: 1000 ledger rows, distinct jobs, attempt 1."""
    queue = unique_queue()
    w0 = workers.start(f"{queue}:4", name="w0")
    w1 = workers.start(f"{queue}:4", name="w1")
    w0.wait_started()
    w1.wait_started()
    with psycopg.connect(app_db) as conn:
        awa_bridge.insert_many_sync(conn, [{"n": i} for i in range(1000)], kind="ledger", queue=queue)
        conn.commit()
    wait_for(lambda: probe.states(queue).get("completed") == 1000, 90, "1000 completions", interval=0.2)

    assert probe.states(queue) == {"completed": 1000}
    total, distinct, first_attempts, per_worker = probe.rows(
        "SELECT count(*), count(DISTINCT job_id), count(*) FILTER (WHERE attempt = 1), "
        "count(DISTINCT worker) FROM t_ledger"
    )[0]
    assert (total, distinct, first_attempts) == (1000, 1000, 1000)
    assert per_worker == 2, "both workers should have taken part"
    assert (
        probe.value("SELECT count(*) FROM awa.jobs WHERE queue = %s AND (attempt, run_lease) <> (1, 1)", (queue,)) == 0
    )


@pytest.mark.slow
def test_two_worker_processes_claim_100000_jobs_once_each(app_db: str, probe: Probe, workers: Workers) -> None:
    """R5 at its full size: 100,000 no-op jobs, two workers of 16 slots, no faults.

    Too many for a ledger row (a commit) per job; the rows say it instead: every job completed at
    attempt 1 under lease 1 (a second claim would have raised both), and the claim records
    (``awa.job_claims``, one per claim statement, naming its worker) hold each job exactly once,
    from both workers."""
    n = 100_000
    queue = unique_queue()
    env = {"AWA_HEARTBEAT_STALENESS": "5"}  # not a rescue test: a stall of a loaded machine is no dead worker
    w0 = workers.start(f"{queue}:16", name="w0", env=env)
    w1 = workers.start(f"{queue}:16", name="w1", env=env)
    w0.wait_started()
    w1.wait_started()
    with psycopg.connect(app_db) as conn:
        awa_bridge.insert_many_sync(conn, [{"n": i} for i in range(n)], kind="noop", queue=queue)
        conn.commit()
    wait_for(lambda: probe.states(queue).get("completed") == n, 240, f"{n:,} completions", interval=0.5)

    assert probe.states(queue) == {"completed": n}
    assert (
        probe.value("SELECT count(*) FROM awa.jobs WHERE queue = %s AND (attempt, run_lease) <> (1, 1)", (queue,)) == 0
    )
    claimed, distinct, claimers = probe.rows(
        "SELECT count(*), count(DISTINCT j.id), count(DISTINCT c.worker) "
        "FROM awa.job_claims c, unnest(c.job_ids) AS j(id)"
    )[0]
    assert (claimed, distinct) == (n, n)
    assert claimers == 2, "both workers should have taken part"


# -- H. maintenance leader ---------------------------------------------------------------


def test_leader_failover_still_promotes_scheduled_jobs(app_db: str, probe: Probe, workers: Workers) -> None:
    """R29 (other process takes over): kill the leader; the survivor wins the lock and promotes due jobs."""
    queue = unique_queue()
    w0 = workers.start(queue, name="w0").wait_started()
    w1 = workers.start(queue, name="w1").wait_started()
    leader = wait_for(
        lambda: next((w for w in (w0, w1) if w.logged("became the maintenance leader")), None), 10, "a leader"
    )
    survivor = w1 if leader is w0 else w0
    assert not survivor.logged("became the maintenance leader")

    leader.kill()
    killed = time.monotonic()
    [job_id] = enqueue(app_db, "ledger", queue, run_at=probe.now() + timedelta(seconds=1))
    assert job(probe, job_id)["state"] == "scheduled"
    survivor.wait_log("became the maintenance leader", timeout=5 * ELECTION_INTERVAL + 2)
    took_over = time.monotonic() - killed
    wait_for(lambda: job(probe, job_id)["state"] == "completed", 10, "the scheduled job to be promoted and run")
    row = job(probe, job_id)
    assert row["attempt"] == 1 and row["attempted_at"] >= row["run_at"]
    assert ledger(probe, job_id) == [(1, 1, survivor.name)]
    print(f"survivor became leader {took_over:.2f} s after the kill")
