"""The worker in process: outcomes, decoding, progress, hooks, pause, wake-up (R23, R25, R26)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pydantic
import pytest

import awa_bridge
from awa_bridge.worker import Cancel, Client, RetryAfter, Snooze, TerminalError, WorkerConfig, backoff_seconds
from awa_bridge.worker.config import QueueConfig
from awa_bridge.worker.context import JobContext
from awa_bridge.worker.runtime import CANCEL_GRACE, POOL_CLOSE_TIMEOUT

from .waiting import insert, job_row, job_state, recording_claims, wait_until


@dataclass
class Greet:
    name: str


class Resize(pydantic.BaseModel):
    url: str
    width: int


async def test_async_and_sync_handlers_complete_with_decoded_args(make_client, db_url: str) -> None:
    client = make_client()
    seen: list[Any] = []

    @client.task(Greet)
    async def greet(job):
        seen.append(("greet", job.args, job.attempt, job.max_attempts, job.queue, job.run_lease))

    @client.task(Resize, queue="default")
    def resize(job):
        seen.append(("resize", job.args, job.metadata, job.tags, job.priority))

    @client.task("raw_dict")
    def raw(job):
        seen.append(("raw", job.args))

    a = insert(db_url, Greet("ada"))
    b = insert(db_url, Resize(url="u", width=3), metadata={"m": 1}, tags=["t"], priority=1)
    c = insert(db_url, {"x": [1]}, kind="raw_dict")
    await client.start(["default:4"])
    await wait_until(lambda: all(job_state(db_url, i) == "completed" for i in (a, b, c)))
    assert ("greet", Greet("ada"), 1, 25, "default", 1) in seen
    assert ("resize", Resize(url="u", width=3), {"m": 1}, ["t"], 1) in seen
    assert ("raw", {"x": [1]}) in seen
    row = job_row(db_url, a)
    assert row["finalized_at"] is not None and row["heartbeat_at"] is None and row["deadline_at"] is None


async def test_one_claim_of_many_jobs_gives_each_handler_its_own_args(make_client, db_url: str) -> None:
    """A claim decodes its jobs' args in one parser call: each job still gets exactly its own args."""
    client = make_client()
    seen: dict[int, Any] = {}

    @client.task("raw_dict")
    async def raw(job):
        seen[job.id] = job.args

    tricky: list[dict[str, Any]] = [
        {},
        {"s": "a, b], {c}", "q": '"quoted"', "u": "żółw ✓ \U0001f600", "nl": "x\ny"},
        {"nested": {"list": [1, [2, [3]], {"k": None}], "f": 0.000015, "e": 1e-7, "big": 2**63 - 1}},
        {"neg": -1, "t": True, "empty": [], "obj": {}},
    ] + [{"n": n} for n in range(40)]
    ids = [insert(db_url, args, kind="raw_dict") for args in tricky]
    await client.start(["default:100"])
    await wait_until(lambda: len(seen) == len(ids))
    assert {i: seen[i] for i in ids} == dict(zip(ids, tricky, strict=True))
    with psycopg.connect(db_url, autocommit=True) as conn:  # the claim records: one row per claim
        largest = conn.execute(
            "SELECT max(cardinality(job_ids)) FROM awa.job_claims WHERE job_ids && %s::bigint[]", (ids,)
        ).fetchone()
    assert largest is not None and largest[0] > 1  # several jobs came in one claim


async def test_a_claimed_job_is_a_whole_job_context(make_client, db_url: str) -> None:
    """The worker fills a claimed JobContext's instance dict itself, bypassing the dataclass
    __init__: every field must be there, so repr, == and dataclasses.replace still work."""
    client = make_client()
    seen: list[JobContext] = []

    @client.task(Greet)
    async def greet(job):
        seen.append(job)

    insert(db_url, Greet("ada"), tags=["t"])
    await client.start(["default:4"])
    await wait_until(lambda: len(seen) == 1)
    job = seen[0]
    assert {f.name for f in dataclasses.fields(JobContext)} <= set(vars(job))
    copy = dataclasses.replace(job)
    assert copy == job and repr(copy) == repr(job)
    assert (job.args, job.tags, job.conn, job.callback_id, job.attached) == (Greet("ada"), ["t"], None, None, True)


async def test_exception_retries_with_backoff_then_fails(make_client, db_url: str) -> None:
    """R25: an always-failing handler runs max_attempts times; each failure is recorded."""
    client = make_client()
    runs: list[int] = []

    @client.task("always_fails")
    def fail(job):
        runs.append(job.attempt)
        raise ValueError(f"boom on attempt {job.attempt}")

    job_id = insert(db_url, {}, kind="always_fails", max_attempts=3)
    await client.start(["default:2"])
    for attempt in (1, 2):
        row = await wait_until(
            lambda attempt=attempt: (
                (r := job_row(db_url, job_id))["state"] == "retryable" and r["attempt"] == attempt and r
            )
        )
        delay = (row["run_at"] - row["attempted_at"]).total_seconds()
        assert 2**attempt * 0.9 <= delay <= 2**attempt * 1.25 + 0.5, delay
        with psycopg.connect(db_url, autocommit=True) as conn:  # fault injection: make it due now
            conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (job_id,))
    await wait_until(lambda: job_state(db_url, job_id) == "failed")
    row = job_row(db_url, job_id)
    assert runs == [1, 2, 3]
    assert row["attempt"] == 3 and row["finalized_at"] is not None
    errors = row["errors"]
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    assert errors[2]["error"] == "boom on attempt 3"
    assert errors[2]["type"] == "ValueError"
    assert "Traceback" in errors[2]["traceback"] and "boom on attempt 3" in errors[2]["traceback"]
    assert datetime.fromisoformat(errors[0]["at"]) <= datetime.fromisoformat(errors[2]["at"])


def test_backoff_formula() -> None:
    import random

    rng = random.Random(7)
    for attempt in range(1, 20):
        value = backoff_seconds(attempt, rng)
        assert 2**attempt <= value <= min(2**attempt * 1.25, 86400) or value == 86400
    assert backoff_seconds(40) == 86400


async def test_retry_after_snooze_cancel_terminal(make_client, db_url: str) -> None:
    client = make_client()

    @client.task("retry_after")
    async def retry_after(job):
        if job.attempt == 1:
            return RetryAfter(0.2)

    @client.task("snoozer")
    async def snoozer(job):
        snoozes = job.metadata.get("snoozes", 0)
        if snoozes < 2:
            job.update_metadata({"snoozes": snoozes + 1})
            job.set_progress(10 * (snoozes + 1), "snoozing")
            raise Snooze(0.05)

    @client.task("canceller")
    def canceller(job):
        return Cancel("customer closed the account")

    @client.task("terminal")
    def terminal(job):
        raise TerminalError("bad card number")

    ids = {
        kind: insert(db_url, {}, kind=kind, max_attempts=5)
        for kind in ("retry_after", "snoozer", "canceller", "terminal")
    }
    await client.start(["default:4"])
    await wait_until(lambda: job_state(db_url, ids["retry_after"]) == "completed")
    await wait_until(lambda: job_state(db_url, ids["snoozer"]) == "completed")
    await wait_until(lambda: job_state(db_url, ids["canceller"]) == "cancelled")
    await wait_until(lambda: job_state(db_url, ids["terminal"]) == "failed")

    retried = job_row(db_url, ids["retry_after"])
    assert retried["attempt"] == 2, "RetryAfter spends an attempt"
    snoozed = job_row(db_url, ids["snoozer"])
    assert snoozed["attempt"] == 1, "Snooze gives the attempt back"
    assert snoozed["metadata"] == {"snoozes": 2}
    assert snoozed["progress"]["percent"] == 20 and snoozed["progress"]["message"] == "snoozing"
    assert snoozed["errors"] == []
    cancelled = job_row(db_url, ids["canceller"])
    assert cancelled["errors"][0]["error"] == "customer closed the account"
    assert cancelled["finalized_at"] is not None
    terminal_row = job_row(db_url, ids["terminal"])
    assert terminal_row["attempt"] == 1 and terminal_row["errors"][0]["error"] == "bad card number"


async def test_unknown_kind_and_bad_args_fail_at_once_and_worker_goes_on(make_client, db_url: str) -> None:
    """R26."""
    client = make_client()
    done: list[int] = []

    @client.task(Greet)
    async def greet(job):
        done.append(job.id)

    unknown = insert(db_url, {}, kind="nobody_handles_this")
    bad = insert(db_url, {"nom": "x"}, kind="greet")
    good = insert(db_url, Greet("bob"))
    await client.start(["default:1"])
    await wait_until(lambda: job_state(db_url, good) == "completed")
    await wait_until(lambda: job_state(db_url, unknown) == "failed" and job_state(db_url, bad) == "failed")
    assert "no handler is registered" in job_row(db_url, unknown)["errors"][0]["error"]
    bad_row = job_row(db_url, bad)
    assert bad_row["attempt"] == 1
    assert "do not decode into Greet" in bad_row["errors"][0]["error"]
    assert done == [good]


async def test_progress_persists_across_retries(make_client, db_url: str) -> None:
    client = make_client()
    observed: list[Any] = []

    @client.task("progressive")
    async def progressive(job):
        observed.append((job.attempt, job.progress and job.progress["percent"], dict(job.metadata)))
        if job.attempt == 1:
            job.set_progress(40, "first half")
            job.update_metadata({"cursor": 400})
            await job.flush_progress()
            raise RetryAfter(0)
        job.set_progress(100, "done")

    job_id = insert(db_url, {}, kind="progressive")
    await client.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert observed == [(1, None, {}), (2, 40, {"cursor": 400})]
    assert job_row(db_url, job_id)["progress"]["message"] == "done"


async def test_raise_max_attempts_from_sync_and_async_handlers(make_client, db_url: str) -> None:
    """The public JobContext call the Celery layer uses: fenced by run_lease, bad numbers refused."""
    client = make_client()
    seen: list[Any] = []

    @client.task("more_sync")
    def more_sync(job):
        try:
            job.raise_max_attempts(1001)
        except awa_bridge.ValidationError as exc:
            seen.append(("refused", exc.field))
        seen.append(("sync", job.attached, job.raise_max_attempts(40), job.raise_max_attempts(3), job.max_attempts))

    @client.task("more_async")
    async def more_async(job):
        seen.append(("async", await job.raise_max_attempts(7)))

    a = insert(db_url, {}, kind="more_sync", max_attempts=5)
    b = insert(db_url, {}, kind="more_async", max_attempts=5)
    await client.start(["default:2"])
    await wait_until(lambda: all(job_state(db_url, i) == "completed" for i in (a, b)))
    assert ("refused", "max_attempts") in seen
    assert ("sync", True, 40, 40, 40) in seen and ("async", 7) in seen  # never lowered
    assert (job_row(db_url, a)["max_attempts"], job_row(db_url, b)["max_attempts"]) == (40, 7)


async def test_sync_handler_flushes_progress_from_its_thread(make_client, db_url: str) -> None:
    client = make_client()
    mid_flight: list[Any] = []

    @client.task("sync_progress")
    def sync_progress(job):
        job.set_progress(50, "half")
        job.flush_progress()
        mid_flight.append(job_row(db_url, job.id)["progress"]["percent"])

    job_id = insert(db_url, {}, kind="sync_progress")
    await client.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert mid_flight == [50]


async def test_hooks_fire(make_client, db_url: str) -> None:
    client = make_client()
    events: list[tuple[str, int]] = []
    for event in ("started", "completed", "retried", "exhausted", "cancelled", "snoozed"):
        client.on(event)(lambda job, event=event: events.append((event, job.id)))

    @client.task("hooked")
    async def hooked(job):
        outcome = job.args["do"]
        if outcome == "retry" and job.attempt == 1:
            raise RetryAfter(0)
        if outcome == "fail":
            raise TerminalError("no")
        if outcome == "cancel":
            return Cancel()
        if outcome == "snooze" and job.attempt == 1 and not job.metadata:
            job.update_metadata({"s": 1})
            return Snooze(0)

    ids = {do: insert(db_url, {"do": do}, kind="hooked") for do in ("ok", "retry", "fail", "cancel", "snooze")}
    await client.start(["default:5"])
    await wait_until(lambda: len([e for e in events if e[0] != "started"]) >= 7)
    assert ("completed", ids["ok"]) in events
    assert ("retried", ids["retry"]) in events and ("completed", ids["retry"]) in events
    assert ("exhausted", ids["fail"]) in events
    assert ("cancelled", ids["cancel"]) in events
    assert ("snoozed", ids["snooze"]) in events and ("completed", ids["snooze"]) in events
    assert events.count(("started", ids["retry"])) == 2


async def test_pause_and_resume_queue(make_client, db_url: str) -> None:
    client = make_client()
    ran: list[int] = []

    @client.task("pausable")
    async def pausable(job):
        ran.append(job.id)

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.queue_meta (queue, paused, paused_at, paused_by) VALUES ('p', true, now(), 't')")
    with recording_claims(db_url) as claims:
        await client.start([QueueConfig("p", max_workers=2, poll_interval=0.05)])
        job_id = insert(db_url, {}, kind="pausable", queue="p")
        await claims.passes()  # claims that saw the committed job and the pause took nothing
    assert ran == [] and job_state(db_url, job_id) == "available"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.queue_meta SET paused = false WHERE queue = 'p'")
    started = time.monotonic()
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert time.monotonic() - started < 2.0


async def test_notify_wakes_the_worker_long_before_the_poll(make_client, db_url: str) -> None:
    client = make_client()
    started_at: dict[int, float] = {}

    @client.task("wake")
    async def wake(job):
        started_at[job.id] = time.monotonic()

    await client.start([QueueConfig("default", poll_interval=30)])
    await wait_until(lambda: client.runtime.listener.connected.is_set())
    latencies = []
    for _ in range(5):
        t0 = time.monotonic()
        job_id = insert(db_url, {}, kind="wake")
        await wait_until(lambda job_id=job_id: job_id in started_at, timeout=5, interval=0.001)
        latencies.append(started_at[job_id] - t0)
    assert max(latencies) < 2.0, latencies  # the poll interval is 30 s: only NOTIFY explains this


async def test_uncommitted_job_is_never_claimed(make_client, db_url: str) -> None:
    """R23."""
    client = make_client()
    ran_at: dict[int, float] = {}

    @client.task("late_commit")
    async def late(job):
        ran_at[job.id] = time.monotonic()

    with recording_claims(db_url) as claims:
        await client.start([QueueConfig("default", poll_interval=0.05)])
        with psycopg.connect(db_url) as conn:
            job = awa_bridge.insert_job_sync(conn, {}, kind="late_commit")
            await claims.passes()  # the worker claimed while the insert was not committed
            assert ran_at == {}, "a job must not run before its transaction commits"
            conn.commit()
            committed = time.monotonic()
    await wait_until(lambda: job.id in ran_at)
    assert ran_at[job.id] >= committed


async def test_scheduled_job_runs_when_due(make_client, db_url: str) -> None:
    client = make_client()
    ran: list[float] = []

    @client.task("later")
    async def later(job):
        ran.append(time.monotonic())

    run_at = datetime.now(UTC) + timedelta(seconds=0.6)
    job_id = insert(db_url, {}, kind="later", run_at=run_at)
    assert job_state(db_url, job_id) == "scheduled"
    await client.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert job_row(db_url, job_id)["attempted_at"] >= run_at


async def test_async_handler_past_deadline_is_cancelled_then_retried(make_client, db_url: str) -> None:
    """R11 (in process): the handler observes cancellation; attempt 2 completes."""
    # The leader's own deadline rescue would race the in-process one; keep it out of this test.
    client = make_client(rescue_interval=60)
    observed: list[str] = []

    @client.task("hangs_once")
    async def hangs_once(job):
        if job.attempt == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                observed.append(f"cancelled attempt {job.attempt}, job.cancelled={job.cancelled}")
                raise

    job_id = insert(db_url, {}, kind="hangs_once")
    await client.start([QueueConfig("default", deadline=0.3)])
    await wait_until(lambda: job_state(db_url, job_id) == "retryable")
    errors = job_row(db_url, job_id)["errors"]
    assert errors[0]["type"] == "DeadlineExceeded"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (job_id,))
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert observed == ["cancelled attempt 1, job.cancelled=True"]
    assert job_row(db_url, job_id)["attempt"] == 2


async def test_blocking_handlers_do_not_starve_heartbeats(make_client, db_url: str) -> None:
    """R12: a GIL-busy sync handler and a loop-blocking async one, each 3x the staleness window."""
    client = make_client()
    runs: list[str] = []

    @client.task("busy_sync")
    def busy(job):
        end = time.monotonic() + 0.8
        while time.monotonic() < end:
            sum(range(1000))
        runs.append(f"sync {job.attempt}")

    @client.task("blocking_async")
    async def blocking(job):
        time.sleep(0.8)  # blocks the event loop on purpose
        runs.append(f"async {job.attempt}")

    a = insert(db_url, {}, kind="busy_sync")
    b = insert(db_url, {}, kind="blocking_async")
    await client.start(["default:2"])
    await wait_until(lambda: job_state(db_url, a) == "completed" and job_state(db_url, b) == "completed")
    assert sorted(runs) == ["async 1", "sync 1"]
    assert job_row(db_url, a)["errors"] == [] and job_row(db_url, b)["errors"] == []


async def test_graceful_shutdown_drains_running_jobs(make_client, db_url: str) -> None:
    """R20 (in process)."""
    client = make_client()

    @client.task("slowish")
    async def slowish(job):
        await asyncio.sleep(0.4)

    ids = [insert(db_url, {"i": i}, kind="slowish") for i in range(3)]
    await client.start(["default:3"])
    await wait_until(lambda: all(job_state(db_url, i) == "running" for i in ids))
    later = insert(db_url, {"i": 99}, kind="slowish")
    await client.shutdown(timeout=5)
    assert [job_state(db_url, i) for i in ids] == ["completed"] * 3
    assert job_state(db_url, later) == "available", "no claims after shutdown began"


async def test_drain_timeout_releases_unfinished_jobs(make_client, db_url: str) -> None:
    """R21 (in process): released without spending the attempt, runnable at once."""
    # A staleness far beyond the test's length: with FAST's 0.25 s a heartbeat delayed by a busy
    # machine let the rescue take the job first (attempt spent), which is not what R21 is about.
    client = make_client(heartbeat_staleness=30)

    @client.task("stuck")
    async def stuck(job):
        await asyncio.sleep(60)

    job_id = insert(db_url, {}, kind="stuck")
    await client.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "running")
    t0 = time.monotonic()
    await client.shutdown(timeout=0.2)
    assert time.monotonic() - t0 < 3
    row = job_row(db_url, job_id)
    assert row["state"] == "available" and row["attempt"] == 0


async def test_a_released_attempt_that_returns_late_commits_nothing(
    make_client, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R21, the late completion: a sync transactional handler that ignores ``job.cancelled`` runs on
    past the drain timeout of ``await client.shutdown(timeout=...)`` in the application's own loop.
    Its attempt is released and another worker runs the job to completion; when the first handler
    finally returns, its finalization is fenced by run_lease, so its write rolls back with it."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t_late")
        conn.execute("CREATE TABLE t_late (job_id bigint, attempt int, run_lease bigint, worker text)")
    returned = threading.Event()
    go_on = threading.Event()
    first = make_client(heartbeat_staleness=30)  # no rescue: the release alone hands the job over

    @first.task("late", transactional=True)
    def lingering(job):
        job.conn.execute("INSERT INTO t_late VALUES (%s, %s, %s, 'first')", (job.id, job.attempt, job.run_lease))
        go_on.wait(30)  # deaf to job.cancelled: still running when the worker lets the attempt go
        returned.set()

    job_id = insert(db_url, {}, kind="late")
    await first.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "running")
    t0 = time.monotonic()
    await first.shutdown(timeout=0.2)
    assert time.monotonic() - t0 < 3  # the lingering handler does not hold the shutdown
    row = job_row(db_url, job_id)
    assert (row["state"], row["attempt"], row["run_lease"]) == ("available", 0, 1), row

    second = make_client(heartbeat_staleness=30)

    @second.task("late", transactional=True)
    def prompt(job):
        job.conn.execute("INSERT INTO t_late VALUES (%s, %s, %s, 'second')", (job.id, job.attempt, job.run_lease))

    await second.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert not returned.is_set()  # the first handler was still running all along
    with caplog.at_level("WARNING", logger="awa_bridge.worker"):
        go_on.set()
        await wait_until(lambda: "was superseded; its writes were rolled back" in caplog.text)
    assert returned.is_set()
    with psycopg.connect(db_url, autocommit=True) as conn:
        effects = conn.execute("SELECT job_id, attempt, run_lease, worker FROM t_late").fetchall()
    assert effects == [(job_id, 1, 2, "second")]
    row = job_row(db_url, job_id)
    assert (row["state"], row["attempt"], row["run_lease"]) == ("completed", 1, 2), row


@pytest.mark.parametrize("style", ["plain", "transactional"])
async def test_a_handler_deaf_to_its_cancellation_does_not_hold_the_shutdown(
    make_client, db_url: str, caplog: pytest.LogCaptureFixture, style: str
) -> None:
    """Stuck code at the drain timeout: an async handler that catches CancelledError and goes on.
    ``await client.shutdown(timeout=...)`` releases its job and returns ``CANCEL_GRACE`` later without
    it (before, it waited as long as the handler ran; a transactional one's connection also held
    the pool's close); when the handler ends at last, nothing is written, and another worker runs
    the released job."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t_deaf")
        conn.execute("CREATE TABLE t_deaf (job_id bigint)")
    go_on = asyncio.Event()
    ended = asyncio.Event()
    cancellations: list[int] = []
    first = make_client(heartbeat_staleness=30)

    @first.task("deaf", transactional=style == "transactional")
    async def deaf(job):
        if job.conn is not None:
            await job.conn.execute("INSERT INTO t_deaf VALUES ($1)", job.id)
        while not go_on.is_set():
            try:
                await go_on.wait()
            except asyncio.CancelledError:
                cancellations.append(job.id)  # and go on
        ended.set()

    job_id = insert(db_url, {}, kind="deaf")
    await first.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "running")
    asyncio.get_running_loop().call_later(30, go_on.set)  # so that a shutdown that waits for it ends
    t0 = time.monotonic()
    with caplog.at_level("INFO", logger="awa_bridge.worker"):
        await first.shutdown(timeout=0.2)
        took = time.monotonic() - t0
        assert CANCEL_GRACE <= took < CANCEL_GRACE + POOL_CLOSE_TIMEOUT + 2, took
        assert cancellations == [job_id] and not ended.is_set()
        assert f"job(s) {job_id}: the handler still runs" in caplog.text
        row = job_row(db_url, job_id)
        assert (row["state"], row["attempt"], row["run_lease"]) == ("available", 0, 1), row

        go_on.set()
        await ended.wait()
        await wait_until(lambda: "after its worker stopped" in caplog.text)
    row = job_row(db_url, job_id)
    assert (row["state"], row["attempt"], row["run_lease"]) == ("available", 0, 1), row
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t_deaf").fetchone() == (0,)

    second = make_client(heartbeat_staleness=30)
    second.task("deaf")(lambda job: None)
    await second.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    row = job_row(db_url, job_id)
    assert (row["attempt"], row["run_lease"]) == (1, 2), row


def test_bad_worker_settings_name_the_setting() -> None:
    with pytest.raises(awa_bridge.ValidationError, match="heartbeat_staleness: must be at least 3 x"):
        WorkerConfig(heartbeat_interval=10, heartbeat_staleness=20)
    with pytest.raises(awa_bridge.ValidationError, match=r"queues\[q\].max_workers"):
        QueueConfig("q", max_workers=0)
    with pytest.raises(awa_bridge.ValidationError, match="NAME:N"):
        QueueConfig.parse("q:x")
    with pytest.raises(awa_bridge.ValidationError, match="rescue_interval"):
        WorkerConfig(rescue_interval=-1)
    with pytest.raises(awa_bridge.ValidationError, match="event_loop: must be one of auto, uvloop, asyncio, got 'tr"):
        WorkerConfig(event_loop="trio")


# A user's program without the awa-bridge[uvloop] extra: uvloop cannot be imported
# (sys.modules[name] = None is how Python marks a module as absent).
_WITHOUT_UVLOOP = """
import sys
sys.modules["uvloop"] = None
import awa_bridge
from awa_bridge.worker import Client
from awa_bridge.worker.aio import loop_factory

assert loop_factory("auto") is None, "auto should fall back to asyncio's own loop"
Client("postgresql://unused", event_loop="auto")
try:
    Client("postgresql://unused", event_loop="uvloop")
except awa_bridge.ValidationError as exc:
    print(exc)
else:
    print("accepted")
"""


def module_level_resize(job: Any) -> None:
    """A sync handler a child process can import by name."""


def test_client_check_refuses_what_start_would_before_connecting() -> None:
    """``Client.check`` opens nothing (the URL reaches no server) and refuses what ``start`` would."""
    client = Client("postgresql://nobody@127.0.0.1:1/none", global_max_workers=3)
    client.task("resize", queue="images")(lambda job: None)
    with pytest.raises(awa_bridge.ValidationError, match=r"^queues\[images\]\.executor: 'process' runs handlers"):
        client.check(["images:2:executor=process"])
    with pytest.raises(awa_bridge.ValidationError, match=r"^global_max_workers: is 3, less than the queues'"):
        client.check(["images:4:min_workers=2", "email:4:min_workers=2"])
    fine = Client("postgresql://nobody@127.0.0.1:1/none")
    fine.task("resize", queue="images")(module_level_resize)
    assert [q.name for q in fine.check(["images:2:executor=process", "email"])] == ["images", "email"]


def test_uvloop_asked_for_but_not_installed_is_refused_naming_the_setting_and_the_extra() -> None:
    """Without uvloop, ``event_loop="uvloop"`` is refused up front and ``"auto"`` runs on asyncio's loop."""
    done = subprocess.run([sys.executable, "-c", _WITHOUT_UVLOOP], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("event_loop: is 'uvloop' but uvloop is not installed (pip install uvloop)"), (
        done.stdout
    )


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_transactional_handler_commits_with_completion_and_rolls_back_on_error(
    make_client, db_url: str, style: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t_effects")
        conn.execute("CREATE TABLE t_effects (job_id bigint NOT NULL, attempt int NOT NULL)")
    client = make_client()
    if style == "async":

        @client.task("tx", transactional=True)
        async def tx_async(job):
            await job.conn.execute("INSERT INTO t_effects VALUES ($1, $2)", job.id, job.attempt)
            if job.args["fail_first"] and job.attempt == 1:
                raise RuntimeError("after the write")
    else:

        @client.task("tx", transactional=True)
        def tx_sync(job):
            job.conn.execute("INSERT INTO t_effects VALUES (%s, %s)", (job.id, job.attempt))
            if job.args["fail_first"] and job.attempt == 1:
                raise RuntimeError("after the write")

    ok = insert(db_url, {"fail_first": False}, kind="tx")
    flaky = insert(db_url, {"fail_first": True}, kind="tx")
    await client.start(["default:2"])
    await wait_until(lambda: job_state(db_url, ok) == "completed")
    await wait_until(lambda: job_state(db_url, flaky) == "retryable")
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT job_id, attempt FROM t_effects ORDER BY job_id").fetchall() == [(ok, 1)]
        conn.execute("UPDATE awa.jobs SET run_at = now() WHERE id = %s", (flaky,))
    await wait_until(lambda: job_state(db_url, flaky) == "completed")
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT job_id, attempt FROM t_effects ORDER BY job_id").fetchall()
    assert rows == [(ok, 1), (flaky, 2)]
    assert job_row(db_url, flaky)["errors"][0]["error"] == "after the write"


async def test_pause_resume_api_applies_to_a_running_worker(make_client, db_url: str) -> None:
    from awa_bridge.admin import pause_queue, resume_queue

    client = make_client()
    ran: list[int] = []

    @client.task("paused_kind")
    async def handler(job):
        ran.append(job.id)

    with recording_claims(db_url) as claims:
        await client.start([QueueConfig("pq", poll_interval=0.05)])
        pause_queue(db_url, "pq", paused_by="ops")
        job_id = insert(db_url, {}, kind="paused_kind", queue="pq")
        await claims.passes()  # claims that saw the committed job and the pause took nothing
    assert ran == []
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT paused, paused_by FROM awa.queue_meta WHERE queue = 'pq'").fetchone() == (
            True,
            "ops",
        )
    resume_queue(db_url, "pq")
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    with pytest.raises(awa_bridge.ValidationError, match="queue"):
        pause_queue(db_url, "")


async def test_an_outcome_that_cannot_be_written_does_not_block_the_batch(make_client, db_url: str) -> None:
    """A completion the database refuses for good is isolated; the job is let go and rescued."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """
            CREATE OR REPLACE FUNCTION pg_temp_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'completion refused for %', NEW.id; END $$;
            """.replace("pg_temp_refuse", "public.refuse_poison_completion")
        )
        conn.execute(
            "CREATE TRIGGER refuse_poison BEFORE UPDATE ON awa.jobs FOR EACH ROW "
            "WHEN (NEW.kind = 'poison' AND NEW.state = 'completed') EXECUTE FUNCTION public.refuse_poison_completion()"
        )
    try:
        client = make_client()

        @client.task("poison")
        async def poison(job):
            pass

        @client.task("fine")
        async def fine(job):
            pass

        bad = insert(db_url, {}, kind="poison", max_attempts=2)
        good = [insert(db_url, {"i": i}, kind="fine") for i in range(5)]
        await client.start(["default:8"])
        await wait_until(lambda: all(job_state(db_url, i) == "completed" for i in good))
        await wait_until(lambda: job_state(db_url, bad) == "failed")
        row = job_row(db_url, bad)
        assert row["attempt"] == 2
        assert [e["type"] for e in row["errors"]] == ["HeartbeatStale", "HeartbeatStale"]
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER IF EXISTS refuse_poison ON awa.jobs")
            conn.execute("DROP FUNCTION IF EXISTS public.refuse_poison_completion()")


def test_an_async_hook_is_refused_at_registration() -> None:
    """``@client.on`` with an ``async def`` was accepted and never ran ("coroutine was never awaited")."""
    client = Client("postgresql://postgres@127.0.0.1:5432/postgres")
    with pytest.raises(TypeError, match=r"hooks are plain functions called on the worker's event loop") as caught:

        @client.on("retried")
        async def notify(job: Any) -> None:
            pass

    assert "asyncio.get_running_loop().create_task(" in str(caught.value)
    assert client.hooks.listeners["retried"] == []

    @client.on("retried")
    def plain(job: Any) -> None:
        pass

    assert client.hooks.listeners["retried"] == [plain]
