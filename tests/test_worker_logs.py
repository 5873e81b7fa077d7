"""What the worker tells an operator, read from a real worker's output (issue 10, point 4).

A retry is a WARNING with the error's type and message and when the job runs
again; a failure for good is an ERROR carrying the traceback, so the
operator sees the user's line without opening the database.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest

import awa_bridge

from .procs import Probe, Workers, unique_queue, wait_for

pytestmark = pytest.mark.slow


def test_retry_warns_and_failure_errors_with_the_traceback(app_db: str, probe: Probe, workers: Workers) -> None:
    queue = unique_queue()
    with psycopg.connect(app_db) as conn:
        job_id = awa_bridge.insert_job(conn, {}, kind="flaky_upstream", queue=queue, max_attempts=2).id
    worker = workers.start(queue).wait_started()
    wait_for(lambda: probe.states(queue) == {"failed": 1}, timeout=20, what="the job to fail after 2 attempts")
    worker.wait_log("failed for good")
    out = worker.output
    retry = re.search(
        rf"WARNING .*job {job_id} \(flaky_upstream on {queue}, attempt 1/2\): "
        r"GatewayTimeout: upstream answered 504; retry in \d+(\.\d)? s",
        out,
    )
    assert retry, out
    failure = out[out.index("failed for good") :]
    assert re.search(rf"ERROR .*job {job_id} \(flaky_upstream on {queue}, attempt 2/2\) failed for good", out), out
    assert "Traceback (most recent call last)" in failure and 'raise GatewayTimeout("upstream answered 504")' in failure


def test_a_rescue_warns_with_its_reason(app_db: str, probe: Probe, workers: Workers) -> None:
    """The worker that rescues a dead worker's attempt says which job, why, and where it went."""
    queue = unique_queue()
    a = workers.start(queue, name="a").wait_started()
    with psycopg.connect(app_db) as conn:
        job_id = awa_bridge.insert_job(conn, {}, kind="hang", queue=queue).id
    wait_for(lambda: probe.states(queue) == {"running": 1}, timeout=10, what="the hang job to run on a")
    b = workers.start(queue, name="b").wait_started()
    a.kill()
    b.wait_log(f"rescued job {job_id}", timeout=20)
    line = next(x for x in b.output.splitlines() if f"rescued job {job_id}" in x)
    assert re.search(
        rf"WARNING .*rescued job {job_id} \(hang on {queue}, attempt 1\): heartbeat stale: "
        r"no heartbeat for [\d.]+ s \(attempt 1\); worker presumed dead; now retryable",
        line,
    ), line


DECISIONS_APP = """
from awa_bridge.worker import Client, RetryAfter, Snooze, TerminalError

client = Client()


class CardError(Exception):
    pass


@client.task("boom")
def boom(job):
    raise CardError("gateway said no")


@client.task("wait_for_rate")
def wait_for_rate(job):
    return RetryAfter(30, "rate limited") if job.args.get("why") else RetryAfter(30)


@client.task("later")
def later(job):
    return Snooze(30)


@client.task("declined")
def declined(job):
    raise TerminalError("card declined")
"""


def test_json_logs_carry_the_traceback_and_decisions_are_info(app_db: str, tmp_path: Path, workers: Workers) -> None:
    """``--log-format json``: a failure's traceback is the ``traceback`` field (the message one line);
    what the handler decided (RetryAfter, Snooze) is INFO, a TerminalError an ERROR without traceback."""
    (tmp_path / "decisions_app.py").write_text(DECISIONS_APP)
    queue = unique_queue()
    with psycopg.connect(app_db) as conn:
        ids = {
            name: awa_bridge.insert_job(conn, args, kind=kind, queue=queue, max_attempts=max_attempts).id
            for name, kind, args, max_attempts in [
                ("boom", "boom", {}, 1),
                ("retry", "wait_for_rate", {}, 5),
                ("retry_why", "wait_for_rate", {"why": 1}, 5),
                ("snooze", "later", {}, 5),
                ("declined", "declined", {}, 5),
            ]
        }
    worker = workers.start(
        queue,
        env={"PYTHONPATH": str(tmp_path)},
        args=["--log-format", "json"],
        target="decisions_app:client",
    )
    worker.wait_log("worker started")
    wait_for(lambda: all(worker.logged(f'"awa_job_id": {i}') for i in ids.values()), 20, "every outcome logged")
    entries = [json.loads(line) for line in worker.lines if line.startswith("{")]
    by_job = {e["awa_job_id"]: e for e in entries if "awa_job_id" in e}

    boom = by_job[ids["boom"]]
    assert boom["level"] == "ERROR" and "\n" not in boom["message"], boom
    assert boom["message"].endswith("failed for good: CardError: gateway said no"), boom
    assert boom["traceback"].startswith("Traceback (most recent call last)"), boom
    assert 'raise CardError("gateway said no")' in boom["traceback"]

    retry, retry_why = by_job[ids["retry"]], by_job[ids["retry_why"]]
    assert retry["level"] == retry_why["level"] == "INFO", (retry, retry_why)
    assert retry["message"].endswith("): retry in 30 s, as its handler asked"), retry
    assert retry_why["message"].endswith("): retry in 30 s, as its handler asked: rate limited"), retry_why
    assert "traceback" not in retry and "traceback" not in retry_why

    snooze = by_job[ids["snooze"]]
    assert snooze["level"] == "INFO" and "snoozed for 30 s" in snooze["message"], snooze

    declined = by_job[ids["declined"]]
    assert declined["level"] == "ERROR" and "traceback" not in declined, declined
    assert declined["message"].endswith("failed for good: TerminalError: card declined"), declined
