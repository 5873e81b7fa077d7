"""Worker subprocesses for the process and chaos tests, and polling helpers.

Workers run ``python -m awa_bridge worker tests.worker_app:client`` from the
repository root; their combined stdout/stderr is drained by a background
thread (a full pipe would block the worker) and kept for assertions and for
the failure report. Every wait polls a predicate with a timeout scaled by
``AWA_CHAOS_TIMEOUT_MULTIPLIER``; nothing asserts after a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg

REPO_ROOT = Path(__file__).resolve().parent.parent
MULTIPLIER = float(os.environ.get("AWA_CHAOS_TIMEOUT_MULTIPLIER", "1"))
LEDGER_TABLES = """
DROP TABLE IF EXISTS t_ledger, t_effects;
CREATE TABLE t_ledger (
    job_id bigint NOT NULL,
    attempt int NOT NULL,
    run_lease bigint NOT NULL,
    worker text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE t_effects (job_id bigint NOT NULL);
"""

T = TypeVar("T")


def scaled(seconds: float) -> float:
    return seconds * MULTIPLIER


def wait_for(predicate: Callable[[], T], timeout: float, what: str = "condition", interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); fail after ``timeout`` (scaled)."""
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.1f} s waiting for {what} (last value {value!r})")
        time.sleep(interval)


def unique_queue(prefix: str = "q") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def create_ledger(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LEDGER_TABLES)


class Probe:
    """One autocommit connection for the test's own reads, reconnecting after server faults."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(self.url, autocommit=True, application_name="test-probe")
        return self.conn

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        for retry in (False, True):
            try:
                return self._connection().execute(sql, params).fetchall()
            except psycopg.OperationalError:
                if retry:
                    raise
        raise AssertionError("unreachable")

    def value(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = self.rows(sql, params)
        return rows[0][0] if rows else None

    def now(self) -> Any:
        return self.value("SELECT clock_timestamp()")

    def states(self, queue: str) -> dict[str, int]:
        return dict(self.rows("SELECT state::text, count(*) FROM awa.jobs WHERE queue = %s GROUP BY 1", (queue,)))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Worker:
    """One ``python -m awa_bridge worker`` subprocess."""

    def __init__(
        self,
        url: str,
        queues: Sequence[str],
        name: str,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        target: str = "tests.worker_app:client",
    ) -> None:
        self.target = target
        self.url = url
        self.queues = list(queues)
        self.name = name
        self.env = dict(env or {})
        self.args = list(args)
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> Worker:
        command = [sys.executable, "-m", "awa_bridge", "worker", self.target]
        for queue in self.queues:
            command += ["--queue", queue]
        env = {**os.environ, "DATABASE_URL": self.url, "AWA_WORKER_NAME": self.name, **self.env}
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [*command, *self.args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,  # a process group of its own, as a terminal or a service manager starts it
        )
        self._reader = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def wait_log(self, text: str, timeout: float = 15.0) -> None:
        def seen() -> bool:
            if self.logged(text):
                return True
            if not self.alive():
                raise AssertionError(f"worker {self.name} exited ({self.returncode}) before logging {text!r}")
            return False

        wait_for(seen, timeout, f"worker {self.name} to log {text!r}")

    def wait_started(self, timeout: float = 15.0) -> Worker:
        self.wait_log("worker started", timeout)
        return self

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def signal_group(self, sig: signal.Signals) -> None:
        """``sig`` to the worker and every process it started, as Ctrl-C in a terminal (or a service
        manager stopping the whole group) sends it."""
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.proc is None:
            return
        if self.alive():
            self.signal(signal.SIGKILL)
        self.wait(10)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(scaled(timeout))
        if self._reader is not None:
            self._reader.join(5)
        if self.proc.stdout is not None and not self._reader_alive():
            self.proc.stdout.close()
        return code

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def report(self) -> str:
        return f"----- worker {self.name} (pid {self.proc.pid if self.proc else '-'}, rc {self.returncode}) -----\n" + (
            self.output
        )


class Workers:
    """Starts workers for one test; kills the survivors and prints every output at teardown."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.started: list[Worker] = []

    def start(
        self,
        queues: str | Sequence[str],
        name: str | None = None,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        url: str | None = None,
        target: str = "tests.worker_app:client",
    ) -> Worker:
        queues = [queues] if isinstance(queues, str) else queues
        name = name or f"w{len(self.started)}"
        worker = Worker(url or self.url, queues, name, env, args, target)
        self.started.append(worker.start())
        return worker

    def close(self) -> None:
        for worker in self.started:
            worker.kill()
        # Shown by pytest only when the test fails.
        for worker in self.started:
            print(worker.report())


def workers_fixture(url: str) -> Iterator[Workers]:
    workers = Workers(url)
    try:
        yield workers
    finally:
        workers.close()


class Producer(threading.Thread):
    """Inserts one job every ``1 / rate`` seconds (on a fixed schedule) until stopped or ``duration`` ends."""

    def __init__(
        self, url: str, queue: str, kinds: Sequence[str] = ("ledger",), rate: float = 20.0, duration: float = 10.0
    ) -> None:
        super().__init__(name="test-producer", daemon=True)
        self.url = url
        self.queue = queue
        self.kinds = list(kinds)
        self.rate = rate
        self.duration = duration
        self.ids: list[int] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        import awa_bridge

        try:
            with psycopg.connect(self.url, autocommit=True, application_name="test-producer") as conn:
                start = time.monotonic()
                while not self.stopping.is_set():
                    due = start + len(self.ids) / self.rate
                    if due - start >= self.duration:
                        return
                    self.stopping.wait(max(0.0, due - time.monotonic()))
                    kind = self.kinds[len(self.ids) % len(self.kinds)]
                    job = awa_bridge.insert_job_sync(conn, {"n": len(self.ids)}, kind=kind, queue=self.queue)
                    self.ids.append(job.id)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> list[int]:
        """Wait for the schedule to end; the inserted ids (raises what the thread raised)."""
        self.join(scaled(self.duration) + 30)
        if self.error is not None:
            raise self.error
        return list(self.ids)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
