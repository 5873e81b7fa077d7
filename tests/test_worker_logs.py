"""What the worker tells an operator, read from a real worker's output (issue 10, point 4).

A retry is a WARNING with the error's type and message and when the job runs
again; a failure for good is an ERROR carrying the traceback, so the
operator sees the user's line without opening the database.
"""

from __future__ import annotations

import re

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
