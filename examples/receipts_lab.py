"""Receipts lab: one job, how many receipts? What the crash window does to an effect.

    python examples/receipts_lab.py            # DATABASE_URL, else an embedded PostgreSQL
    python examples/receipts_lab.py --json     # the same, results as JSON on stdout
    python examples/receipts_lab.py --trace    # also every case's trace, line by line

A worker runs a job's handler, the handler makes an effect, and the worker
acknowledges the job (marks it completed) after the handler returns. A worker
that stops in between is the crash window: the job is rescued and a
replacement worker runs the handler again. The lab starts a local mail
provider in its own process (``receipts_lab_provider.py``, HTTP on 127.0.0.1
only, stops by itself) and a REAL worker process (``python -m awa_bridge
worker receipts_lab_worker:client``), lets every case reach its crash
instant, kills the worker with SIGKILL, starts a replacement, and prints
per case the handler starts, the requests the provider received, the
receipts it delivered, the database effects and the final job state.

Outside the database (a receipt email):

(a) normal: receipts + idempotent provider, no crash: 1 / 1 / 1.
(b) naive send, killed after sending: 2 starts / 2 requests / 2 receipts.
(c) the provider remembers a stable operation key (no receipt): 2 / 2 / 1.
(d) receipts + idempotent provider, killed after the send and before the
    outcome is saved: the replacement re-sends with the same key, the
    provider replays its answer, the outcome is recorded, the job
    completes: 2 / 2 / 1, no operator needed.
(e) receipts + a provider that is NOT idempotent, same crash: the outcome
    is unknown; it is never re-sent; the job is parked in
    ``waiting_external`` for reconciliation: 2 / 1 / 1.
(f) acknowledgement before the effect: the email waited in memory and died
    with the worker: 1 / 0 / 0, and the job says completed.
(g) conflict: killed after sending, then the order is edited, so the same
    operation key now comes with a changed payload. The receipts table
    refuses it (``ReceiptConflict``, no request) and so does the provider
    when a second job sends it with the same key (422
    ``operation_conflict``): one receipt delivered, both jobs failed.

In the database (a refund row):

(db-a) normal: 1 start, 1 effect.
(db-b) effect committed in the application's own transaction, killed
       before the acknowledgement: 2 / 2.
(db-c) the same with a receipt in that transaction: 2 / 1.
(db-d) acknowledgement before the effect: 1 / 0.
(h)    transactional handler (``transactional=True``), killed after writing
       the refund on ``job.conn`` and before that transaction commits: the
       effect rolls back with the attempt: 2 / 1, exactly once however the
       worker dies (the effect commits exactly when the completion does).

Everything runs in a throwaway database created on the server (dropped at
the end; ``--keep`` keeps it). Worker timings: heartbeat 0.1 s, staleness
0.5 s, rescue every 0.2 s, so the lab takes a few seconds. Ctrl-C stops the
processes it started, drops the database and exits 130.

Needs the example dependencies: ``pip install -e '.[examples]'`` from the
repository root.
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
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

try:
    import psycopg

    import awa_bridge
    from awa_bridge.embedded import database_url_or_embedded
except ModuleNotFoundError as missing:
    sys.exit(
        f"error: {missing.name} is not installed: from the repository root run pip install -e '.[examples]' "
        "(awa-bridge with the example dependencies), then run the lab again"
    )

EXAMPLES = Path(__file__).resolve().parent
SCHEMA = "receipts_lab"
AMOUNT, EDITED_AMOUNT = 4999, 5999


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    kind: str
    expected: tuple[int, int | None, int | None, int | None, str]  # starts, requests, delivered, effects, job
    args: dict[str, Any] = field(default_factory=dict)
    crash: bool = False

    @property
    def external(self) -> bool:
        return self.kind.startswith("lab_email")


CASES = [
    Case("a", "normal", "lab_email_receipt", (1, 1, 1, None, "completed"), {"provider": "idempotent"}),
    Case("b", "naive send, killed after sending", "lab_email_naive", (2, 2, 2, None, "completed"), crash=True),
    Case("c", "provider remembers the key", "lab_email_keyed", (2, 2, 1, None, "completed"), crash=True),
    Case(
        "d",
        "receipts + idempotent provider, killed after send, before save",
        "lab_email_receipt",
        (2, 2, 1, None, "completed"),
        {"provider": "idempotent"},
        crash=True,
    ),
    Case(
        "e",
        "receipts + provider NOT idempotent, same crash",
        "lab_email_receipt",
        (2, 1, 1, None, "parked: waiting_external (OutcomeUnknown)"),
        {"provider": "plain"},
        crash=True,
    ),
    Case("f", "acknowledgement before the effect", "lab_email_ack_first", (1, 0, 0, None, "completed")),
    Case(
        "g",
        "conflict: same key, changed payload",
        "lab_email_receipt",
        (3, 2, 1, None, "failed: ReceiptConflict; failed: operation_conflict"),
        {"provider": "idempotent"},
        crash=True,
    ),
    Case("db-a", "normal", "lab_refund", (1, None, None, 1, "completed")),
    Case("db-b", "duplicate effect without receipts", "lab_refund", (2, None, None, 2, "completed"), crash=True),
    Case("db-c", "effect reused with receipts", "lab_refund_with_receipt", (2, None, None, 1, "completed"), crash=True),
    Case("db-d", "acknowledgement before the effect", "lab_refund_ack_first", (1, None, None, 0, "completed")),
    Case(
        "h",
        "transactional handler, killed before its commit",
        "lab_refund_transactional",
        (2, None, None, 1, "completed"),
        crash=True,
    ),
]
BY_NAME = {case.name: case for case in CASES}
FINAL = {"waiting_external", "failed", "completed", "cancelled"}

LAB_TABLES = f"""
DROP SCHEMA IF EXISTS {SCHEMA} CASCADE;
CREATE SCHEMA {SCHEMA};
CREATE TABLE {SCHEMA}.orders (
    order_id           text PRIMARY KEY,
    email              text NOT NULL,
    amount_cents       int NOT NULL,
    receipt_message_id text
);
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


def order_of(case: str) -> str:
    return f"order-{case.upper()}-1001"


class Lab:
    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.queue = f"receipts_lab_{uuid.uuid4().hex[:8]}"
        self.conn = psycopg.connect(url, autocommit=True, application_name="receipts-lab")
        self.jobs: dict[str, list[int]] = {}
        self.workers: list[subprocess.Popen[bytes]] = []
        self.provider: subprocess.Popen[bytes] | None = None
        self.provider_url = ""
        self.settled: dict[int, datetime] = {}  # when the lab first saw each job in a final state

    def close(self) -> None:
        for proc in [*self.workers, self.provider]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        self.conn.close()

    # -- processes -----------------------------------------------------------------

    def start_provider(self) -> None:
        port_file = self.log_dir / "provider.port"
        log = open(self.log_dir / "provider.log", "wb")  # noqa: SIM115 - handed to the child
        command = [sys.executable, str(EXAMPLES / "receipts_lab_provider.py"), "--port-file", str(port_file)]
        self.provider = subprocess.Popen([*command, "--lifetime", "120"], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for("the mail provider to listen", lambda: self.running(self.provider, "provider") and port_file.exists())
        self.provider_url = f"http://127.0.0.1:{int(port_file.read_text())}"
        self.note("lab: started the mail provider", f"{self.provider_url}, pid {self.provider.pid}")

    def start_worker(self) -> subprocess.Popen[bytes]:
        number = len(self.workers) + 1
        env = {
            **os.environ,
            "DATABASE_URL": self.url,
            "RECEIPTS_LAB_SCHEMA": SCHEMA,
            "RECEIPTS_LAB_PROVIDER": self.provider_url,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
        }
        log = open(self.log_dir / f"worker{number}.log", "wb")  # noqa: SIM115 - handed to the child
        command = [sys.executable, "-m", "awa_bridge", "worker", "receipts_lab_worker:client"]
        command += ["--queue", f"{self.queue}:16", "--log-level", "warning"]
        proc = subprocess.Popen(command, env=env, cwd=EXAMPLES, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.workers.append(proc)
        self.note(f"lab: started worker {number}", f"pid {proc.pid}")
        return proc

    def running(self, proc: subprocess.Popen[bytes] | None, name: str) -> bool:
        if proc is None or proc.poll() is not None:
            log = (self.log_dir / f"{name}.log").read_text(errors="replace")
            raise RuntimeError(f"{name} exited with {proc and proc.returncode}:\n{log}")
        return True

    # -- steps ---------------------------------------------------------------------

    def note(self, event: str, detail: str = "", case: str | None = None) -> None:
        """A lab line: in every case's trace, or only in ``case``'s."""
        self.conn.execute(
            f"INSERT INTO {SCHEMA}.trace (case_name, event, detail) VALUES (%s, %s, %s)", (case, event, detail)
        )

    def enqueue(self, case: Case, kind: str | None = None) -> None:
        args = {"case": case.name, "order": order_of(case.name), "amount_cents": AMOUNT, **case.args}
        if case.crash and kind is None:
            args["stop_in_crash_window"] = True
        with psycopg.connect(self.url) as conn:
            job = awa_bridge.insert_job_sync(conn, args, kind=kind or case.kind, queue=self.queue, max_attempts=5)
            conn.commit()
        self.jobs.setdefault(case.name, []).append(job.id)

    def row(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        """The one row a lab query returns."""
        found = self.conn.execute(sql, params).fetchone()
        if found is None:
            raise LookupError(f"no row for {sql!r} {params!r}")
        return found

    def state(self, case: str, index: int = 0) -> str:
        job_id = self.jobs[case][index]
        state, now = self.row("SELECT state::text, clock_timestamp() FROM awa.jobs WHERE id = %s", (job_id,))
        if state in FINAL:
            self.settled.setdefault(job_id, now)
        return str(state)

    def traced(self, case: str, event: str) -> bool:
        row = self.conn.execute(
            f"SELECT 1 FROM {SCHEMA}.trace WHERE case_name = %s AND event = %s", (case, event)
        ).fetchone()
        return row is not None

    def at_crash_instant(self, case: Case) -> bool:
        if case.crash:
            return self.traced(case.name, "in the crash window")
        return self.state(case.name) == "completed"

    def run(self) -> None:
        self.start_provider()
        with psycopg.connect(self.url) as conn:
            for case in CASES:
                email = f"{case.name}@customer.example"
                conn.execute(f"INSERT INTO {SCHEMA}.orders VALUES (%s, %s, %s)", (order_of(case.name), email, AMOUNT))
        for case in CASES:
            self.enqueue(case)
        first = self.start_worker()
        wait_for(
            "every case at its crash instant (or completed)",
            lambda: self.running(first, "worker1") and all(self.at_crash_instant(case) for case in CASES),
        )
        waiting = ", ".join(case.name for case in CASES if case.crash)
        self.note("lab: SIGKILL worker 1", f"pid {first.pid}; in the crash window: {waiting}")
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        self.conn.execute(
            f"UPDATE {SCHEMA}.orders SET amount_cents = %s WHERE order_id = %s", (EDITED_AMOUNT, order_of("g"))
        )
        edited = f"amount {AMOUNT} -> {EDITED_AMOUNT}: the receipt email's payload changes"
        self.note("lab: edited order G", edited, case="g")
        self.enqueue(BY_NAME["g"], kind="lab_email_keyed")
        second_job = f"job {self.jobs['g'][-1]}, lab_email_keyed: the same key sent straight to the provider"
        self.note("lab: enqueued a second job for (g)", second_job, case="g")
        second = self.start_worker()
        wait_for(
            "every job rescued and settled by worker 2",
            lambda: (
                self.running(second, "worker2")
                and all(self.state(name, i) in FINAL for name, ids in self.jobs.items() for i in range(len(ids)))
            ),
        )
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=15)
        self.note("lab: stopped worker 2", f"SIGTERM, exit code {second.returncode}")

    # -- report --------------------------------------------------------------------

    def provider_stats(self) -> dict[str, dict[str, int]]:
        with urllib.request.urlopen(f"{self.provider_url}/stats", timeout=5) as response:
            stats: dict[str, dict[str, int]] = json.loads(response.read())["cases"]
        return stats

    def job_summary(self, job_id: int) -> dict[str, Any]:
        state, attempt, errors, metadata, callback_id, finalized_at = self.row(
            "SELECT state::text, attempt, to_jsonb(errors), metadata, callback_id::text, finalized_at "
            "FROM awa.jobs WHERE id = %s",
            (job_id,),
        )
        label = state
        if state == "failed":
            label = f"failed: {(errors or [{}])[-1].get('error', '?').split(':')[0]}"
        elif state == "waiting_external" and "outcome_unknown" in metadata:
            label = "parked: waiting_external (OutcomeUnknown)"
        return {
            "id": job_id,
            "state": state,
            "label": label,
            "attempt": attempt,
            "errors": [{k: e.get(k) for k in ("type", "error", "attempt", "at")} for e in errors or []],
            "outcome_unknown": metadata.get("outcome_unknown"),
            "callback_id": callback_id,
            "finalized_at": finalized_at,
        }

    def report(self) -> dict[str, dict[str, Any]]:
        stats = self.provider_stats()
        started = self.row(f"SELECT min(at) FROM {SCHEMA}.trace")[0]
        results = {}
        for case in CASES:
            starts = self.row(
                f"SELECT count(*) FROM {SCHEMA}.trace WHERE case_name = %s AND event = 'handler started'", (case.name,)
            )[0]
            effects = self.conn.execute(
                f"SELECT attempt FROM {SCHEMA}.effects WHERE case_name = %s ORDER BY id", (case.name,)
            ).fetchall()
            jobs = [self.job_summary(job_id) for job_id in self.jobs[case.name]]
            counters = stats.get(case.name, {})
            got = (
                int(starts),
                counters.get("requests", 0) if case.external else None,
                counters.get("delivered", 0) if case.external else None,
                None if case.external else len(effects),
                "; ".join(job["label"] for job in jobs),
            )
            results[case.name] = {
                "title": case.title,
                "kind": case.kind,
                "handler_starts": got[0],
                "external_requests": got[1],
                "delivered_receipts": got[2],
                "provider_replays": counters.get("replayed", 0) if case.external else None,
                "provider_conflicts": counters.get("conflicts", 0) if case.external else None,
                "db_effects": got[3],
                "effect_attempts": [attempt for (attempt,) in effects],
                "job": got[4],
                "jobs": jobs,
                "expected": list(case.expected),
                "as_expected": got == case.expected,
                "trace": self.trace_lines(case.name, jobs, started),
            }
        return results

    def trace_lines(self, case: str, jobs: list[dict[str, Any]], started: datetime) -> list[str]:
        """The case's lines in time order, each naming its job (and attempt); lab lines name none."""
        lines: list[tuple[datetime, str, str]] = [
            (at, who(job_id, attempt), f"{event}: {detail}".rstrip(": "))
            for at, job_id, attempt, event, detail in self.conn.execute(
                f"SELECT at, job_id, attempt, event, detail FROM {SCHEMA}.trace "
                "WHERE case_name = %s OR case_name IS NULL ORDER BY at, id",
                (case,),
            )
        ]
        for job in jobs:
            for error in job["errors"]:
                if error["type"] in ("HeartbeatStale", "DeadlineExceeded"):
                    at = datetime.fromisoformat(error["at"])
                    lines.append((at, who(job["id"], error["attempt"]), f"rescued by maintenance: {error['error']}"))
            if job["finalized_at"] is None:
                continue
            if BY_NAME[case].kind != "lab_refund_transactional":
                lines.append((job["finalized_at"], who(job["id"]), f"acknowledged: {job['state']}"))
                continue
            # A transactional handler runs INSIDE the transaction that completes its job, and finalized_at
            # is that transaction's now(): when it began, before the handler started. Its commit time is not
            # recorded; the lab shows when it first saw the job completed.
            began = "completion transaction began (the handler runs inside it; it commits with the refund)"
            lines.append((job["finalized_at"], who(job["id"], job["attempt"]), began))
            if job["id"] in self.settled:
                seen = f"acknowledged: {job['state']}, the refund committed with it (seen by the lab)"
                lines.append((self.settled[job["id"]], who(job["id"]), seen))
        lines.sort(key=lambda line: line[0])
        width = max(len(name) for _, name, _ in lines)
        return [f"+{(at - started).total_seconds():6.3f}s  {name:<{width}}  {text}" for at, name, text in lines]


def who(job_id: int | None, attempt: int | None = None) -> str:
    if job_id is None:
        return ""
    return f"job {job_id}" + (f" attempt {attempt}" if attempt else "")


def cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_table(results: dict[str, dict[str, Any]], trace: bool) -> None:
    if trace:
        for name, result in results.items():
            print(f"\n({name}) {result['title']}  [{result['kind']}]")
            for line in result["trace"]:
                print(f"    {line}")
        print()
    titles = {name: f"({name}) {result['title']}" for name, result in results.items()}
    width = max(map(len, titles.values()))
    rows = []
    for name, result in results.items():
        counts = [result[k] for k in ("handler_starts", "external_requests", "delivered_receipts", "db_effects")]
        numbers = f"{cell(counts[0]):>6} {cell(counts[1]):>8} {cell(counts[2]):>9} {cell(counts[3]):>10}"
        rows.append(f"{titles[name]:<{width}} {numbers}  {result['job']}")
        if not result["as_expected"]:
            wanted = " / ".join(value if isinstance(value, str) else cell(value) for value in result["expected"])
            rows.append(f"    UNEXPECTED: wanted {wanted}")
    print(f"{'case':<{width}} {'starts':>6} {'requests':>8} {'delivered':>9} {'db effects':>10}  job")
    print("-" * max(map(len, rows)))
    print("\n".join(rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the throwaway database (its name is printed)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout instead of a table")
    parser.add_argument("--trace", action="store_true", help="also print every case's trace")
    ns = parser.parse_args()
    out = sys.stderr if ns.json else sys.stdout
    say: Callable[[str], None] = lambda text: print(text, file=out, flush=True)  # noqa: E731

    interrupted = False

    def on_sigint(signum: int, frame: Any) -> None:
        # Ctrl-C: a terminal sends SIGINT to the whole process group, so the workers and the provider
        # get it too. Whatever the lab was doing then (even a worker found gone) is the interruption;
        # a second Ctrl-C does not cut the cleanup short.
        nonlocal interrupted
        interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    server_url, server, name, created = "", None, "", False
    lab = None
    started = time.monotonic()
    try:
        server_url, server = database_url_or_embedded()
        name = f"receipts_lab_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        created = True
        url = with_dbname(server_url, name)
        say(f"receipts lab on database {name} ({'embedded PostgreSQL' if server else 'DATABASE_URL'})")
        say("worker timings: heartbeat 0.1 s, staleness 0.5 s, rescue every 0.2 s")
        awa_bridge.migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(LAB_TABLES)
        with tempfile.TemporaryDirectory(prefix="receipts-lab-") as log_dir:
            lab = Lab(url, Path(log_dir))
            lab.run()
            results = lab.report()
            lab.close()
        seconds = round(time.monotonic() - started, 1)
        if ns.json:
            print(json.dumps({"seconds": seconds, "cases": results}, indent=2, default=str))
        else:
            print_table(results, ns.trace)
            print(f"\nran in {seconds} s")
        return 0 if all(result["as_expected"] for result in results.values()) else 1
    except BaseException:
        if not interrupted:
            raise
        return 130  # the finally below cleans up, then says so
    finally:
        done = []
        if lab is not None:
            lab.close()
            done.append("stopped the workers and the mail provider")
        if created and ns.keep:
            done.append(f"kept database {name}")
            if not interrupted:
                say(f"kept database {name}")
        elif created:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            done.append(f"dropped database {name}")
        if server is not None:
            server.cleanup()
            done.append("stopped the embedded PostgreSQL")
        if interrupted:
            print(f"interrupted: {', '.join(done) or 'nothing to clean up'}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
