"""Receipts lab: what happens to a business effect when the worker dies in the crash window.

    python examples/receipts_lab.py            # DATABASE_URL, else an embedded PostgreSQL

A job's handler commits its effect (a refund row) in the application's own
transaction; the worker acknowledges the job (marks it completed) after the
handler returns. A worker that stops between the two is the crash window:
the job is rescued and delivered again. This lab runs four jobs through a
REAL worker process (``python -m awa_bridge worker
receipts_lab_worker:client``), kills it with SIGKILL while they sit in that
window, starts a second worker, and reports for each case the deliveries,
the saved effects and the trace lines that prove them:

(a) normal: no crash; one delivery, one effect.
(b) duplicate effect without receipts: the effect committed, the worker
    was killed before acknowledging, the job was rescued and ran again:
    two effects.
(c) effect reused with receipts: the same crash, but the effect's
    transaction also recorded a receipt (tenant, operation key, payload
    fingerprint, outcome); the second delivery finds it and reuses the
    outcome: one effect.
(d) acknowledgement before the effect: the handler returned first (the job
    is completed) and left the effect to an in-memory queue; the worker was
    killed before it ran: zero effects, and nothing will ever retry it.

All writes are real PostgreSQL writes in a throwaway database created on the
server (dropped at the end; ``--keep`` keeps it). Worker timings: heartbeat
0.1 s, staleness 0.5 s, rescue every 0.2 s, so the lab takes a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

import awa_bridge
from awa_bridge.embedded import database_url_or_embedded

EXAMPLES = Path(__file__).resolve().parent
SCHEMA = "receipts_lab"
CASES = {
    "a": ("normal", "lab_refund", False),
    "b": ("duplicate effect without receipts", "lab_refund", True),
    "c": ("effect reused with receipts", "lab_refund_with_receipt", True),
    "d": ("acknowledgement before the effect", "lab_refund_ack_first", False),
}
EXPECTED = {"a": (1, 1), "b": (2, 2), "c": (2, 1), "d": (1, 0)}  # (deliveries, saved effects)

LAB_TABLES = f"""
DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.effects (
    id           serial PRIMARY KEY,
    case_name    text NOT NULL,
    job_id       bigint NOT NULL,
    attempt      int NOT NULL,
    order_id     text NOT NULL,
    amount_cents int NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE {SCHEMA}.trace (
    id        serial PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    case_name text,
    job_id    bigint,
    attempt   int,
    run_lease bigint,
    pid       int,
    event     text NOT NULL,
    detail    text NOT NULL DEFAULT ''
);
"""


def with_dbname(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


class Lab:
    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.queue = f"receipts_lab_{uuid.uuid4().hex[:8]}"
        self.conn = psycopg.connect(url, autocommit=True, application_name="receipts-lab")
        self.jobs: dict[str, int] = {}
        self.workers: list[subprocess.Popen[bytes]] = []

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.conn.close()

    # -- steps ---------------------------------------------------------------------

    def note(self, event: str, detail: str = "") -> None:
        self.conn.execute(f"INSERT INTO {SCHEMA}.trace (event, detail) VALUES (%s, %s)", (event, detail))

    def enqueue(self) -> None:
        with psycopg.connect(self.url) as conn:
            for case, (_, kind, crash) in CASES.items():
                args = {"case": case, "order": f"order-{case.upper()}-1001", "amount_cents": 4999}
                if crash:
                    args["stop_in_crash_window"] = True
                job = awa_bridge.insert_job_sync(conn, args, kind=kind, queue=self.queue, max_attempts=5)
                self.jobs[case] = job.id
            conn.commit()

    def start_worker(self) -> subprocess.Popen[bytes]:
        number = len(self.workers) + 1
        env = {
            **os.environ,
            "DATABASE_URL": self.url,
            "RECEIPTS_LAB_SCHEMA": SCHEMA,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
        }
        log = open(self.log_dir / f"worker{number}.log", "wb")  # noqa: SIM115 - handed to the child
        command = [sys.executable, "-m", "awa_bridge", "worker", "receipts_lab_worker:client"]
        command += ["--queue", f"{self.queue}:4", "--log-level", "warning"]
        proc = subprocess.Popen(command, env=env, cwd=EXAMPLES, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.workers.append(proc)
        self.note(f"lab: started worker {number}", f"pid {proc.pid}")
        return proc

    def state(self, case: str) -> str:
        return self.conn.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (self.jobs[case],)).fetchone()[0]

    def traced(self, case: str, event: str) -> bool:
        row = self.conn.execute(
            f"SELECT 1 FROM {SCHEMA}.trace WHERE case_name = %s AND event = %s", (case, event)
        ).fetchone()
        return row is not None

    def alive(self, proc: subprocess.Popen[bytes]) -> bool:
        if proc.poll() is not None:
            log = (self.log_dir / f"worker{self.workers.index(proc) + 1}.log").read_text(errors="replace")
            raise RuntimeError(f"worker pid {proc.pid} exited with {proc.returncode}:\n{log}")
        return True

    def run(self) -> None:
        self.enqueue()
        first = self.start_worker()
        wait_for(
            "(a) completed, (b) and (c) in the crash window, (d) completed",
            lambda: (
                self.alive(first)
                and self.state("a") == "completed"
                and self.traced("b", "in the crash window")
                and self.traced("c", "in the crash window")
                and self.state("d") == "completed"
            ),
        )
        self.note(
            "lab: SIGKILL worker 1",
            f"pid {first.pid}; (b) and (c) sit in the crash window, (d)'s refund waits in its memory",
        )
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        second = self.start_worker()
        wait_for(
            "(b) and (c) rescued and completed by worker 2",
            lambda: self.alive(second) and self.state("b") == "completed" and self.state("c") == "completed",
        )
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=15)
        self.note("lab: stopped worker 2", f"SIGTERM, exit code {second.returncode}")

    # -- report --------------------------------------------------------------------

    def report(self) -> dict[str, dict[str, Any]]:
        started = self.conn.execute(f"SELECT min(at) FROM {SCHEMA}.trace").fetchone()[0]
        results = {}
        for case, (title, kind, _) in CASES.items():
            job_id = self.jobs[case]
            job = self.conn.execute(
                "SELECT state::text, attempt, to_jsonb(errors), finalized_at FROM awa.jobs WHERE id = %s", (job_id,)
            ).fetchone()
            deliveries = self.conn.execute(
                f"SELECT count(*) FROM {SCHEMA}.trace WHERE job_id = %s AND event = 'delivered'", (job_id,)
            ).fetchone()[0]
            effects = self.conn.execute(
                f"SELECT id, attempt FROM {SCHEMA}.effects WHERE job_id = %s ORDER BY id", (job_id,)
            ).fetchall()
            lines: list[tuple[datetime, str]] = [
                (at, f"{'attempt ' + str(attempt) if attempt else '':<9} {event}: {detail}".rstrip(": "))
                for at, attempt, event, detail in self.conn.execute(
                    f"SELECT at, attempt, event, detail FROM {SCHEMA}.trace "
                    "WHERE job_id = %s OR case_name IS NULL ORDER BY at, id",
                    (job_id,),
                )
            ]
            for error in job[2] or []:
                if error.get("type") in ("HeartbeatStale", "DeadlineExceeded"):
                    at = datetime.fromisoformat(error["at"])
                    lines.append(
                        (at, f"{'attempt ' + str(error['attempt']):<9} rescued by maintenance: {error['error']}")
                    )
            if job[3] is not None:
                lines.append((job[3], f"{'':<9} job acknowledged: {job[0]} (awa.jobs.finalized_at)"))
            lines.sort(key=lambda line: line[0])
            results[case] = {
                "title": title,
                "kind": kind,
                "job_id": job_id,
                "deliveries": int(deliveries),
                "saved_effects": len(effects),
                "effect_attempts": [attempt for _, attempt in effects],
                "state": job[0],
                "attempt": job[1],
                "trace": [f"+{(at - started).total_seconds():6.3f}s  {text}" for at, text in lines],
            }
        return results


def print_report(results: dict[str, dict[str, Any]]) -> bool:
    ok = True
    for case, result in results.items():
        expected = EXPECTED[case]
        got = (result["deliveries"], result["saved_effects"])
        ok &= got == expected
        print(f"\n({case}) {result['title']}  [job {result['job_id']}, kind {result['kind']}]")
        print(f"    deliveries:    {result['deliveries']}")
        print(f"    saved effects: {result['saved_effects']}", end="")
        if result["effect_attempts"]:
            print(f"  (written by attempt {', '.join(map(str, result['effect_attempts']))})", end="")
        print(f"\n    job:           {result['state']} after attempt {result['attempt']}")
        print("    trace:")
        for line in result["trace"]:
            print(f"      {line}")
        if got != expected:
            print(f"    UNEXPECTED: wanted {expected[0]} deliveries and {expected[1]} saved effects")
    print("\nsummary")
    print(f"  {'case':<42} {'deliveries':>10} {'saved effects':>14}")
    for case, result in results.items():
        title = f"({case}) {result['title']}"
        print(f"  {title:<42} {result['deliveries']:>10} {result['saved_effects']:>14}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the throwaway database (its name is printed)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    ns = parser.parse_args()

    server_url, server = database_url_or_embedded()
    name = f"receipts_lab_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = with_dbname(server_url, name)
    print(f"receipts lab on database {name} ({'embedded PostgreSQL' if server else 'DATABASE_URL'})")
    print("worker timings: heartbeat 0.1 s, staleness 0.5 s, rescue every 0.2 s")
    lab = None
    try:
        awa_bridge.migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(LAB_TABLES)
        with tempfile.TemporaryDirectory(prefix="receipts-lab-") as log_dir:
            lab = Lab(url, Path(log_dir))
            started = time.monotonic()
            lab.run()
            results = lab.report()
            lab.close()
        ok = print_report(results)
        print(f"\nran in {time.monotonic() - started:.1f} s")
        if ns.json:
            Path(ns.json).write_text(json.dumps(results, indent=2))
        return 0 if ok else 1
    finally:
        if lab is not None:
            lab.close()
        if ns.keep:
            print(f"kept database {name}")
        else:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    sys.exit(main())
