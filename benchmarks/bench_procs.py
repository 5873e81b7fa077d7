"""Worker subprocesses that report while they run, for bench_soak.py and bench_scale.py.

bench_worker.py's children report once, when stopped. A soak needs figures
every minute and a scale run needs to know which process ran which job, so
these children answer three commands on stdin, one line each:

* ``GO``: start the worker; answers ``STARTED``.
* ``STATS``: answers ``STATS {"handled": n, "latencies": [...]}`` with the jobs
  handled and the pickup latencies (milliseconds) recorded since the previous
  ``STATS`` (each job carries ``t``, the producer's ``time.time()`` just before
  its insert; 0 means not timed).
* ``STOP`` (or end of input): stop the worker, write the ids of every job it
  handled to the ledger file if one was given (int64 array), answer
  ``RESULT {"handled": n}``, exit.

The parent side is ``Worker``. Run ``python benchmarks/bench_procs.py --help``
for the child's own options (only the benchmarks start it).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn
from urllib.parse import urlsplit

KIND = "noop"
QUEUE = "bench"
CHILD_SYSTEMS = ("awa_bridge", "pgqueuer", "procrastinate")
PGQUEUER_BATCH = 100  # as bench_worker.py: its default of 10 drains 2-4x slower
PROCRASTINATE_POOL = 10
# A STATS line carries every latency of its period: a minute at 20,000 jobs/s is ~10 MB.
STDOUT_LINE_LIMIT = 2**27


LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def loop_factory(system: str, bridge_config: dict[str, Any] | None = None) -> LoopFactory | None:
    """The event loop a worker of ``system`` runs on when started by its own CLI; None for asyncio's.

    awa_bridge: its ``WorkerConfig.event_loop``, asyncio's own by default
    (``--bridge-config '{"event_loop": "uvloop"}'`` changes it); pgqueuer: uvloop where installed (a
    dependency of pgqueuer), as ``pgq run`` does; procrastinate: asyncio's own loop, as its CLI does.
    """
    from awa_bridge.worker.aio import loop_factory as bridge_loop
    from awa_bridge.worker.config import WorkerConfig

    if system == "awa_bridge":
        return bridge_loop(WorkerConfig(**(bridge_config or {})).event_loop)
    return bridge_loop("auto") if system == "pgqueuer" else None


def loop_names(systems: list[str], bridge_config: dict[str, Any] | None = None) -> str:
    """``awa_bridge uvloop, pgqueuer uvloop, ...``: for the reports' headers."""
    return ", ".join(f"{s} {'asyncio' if loop_factory(s, bridge_config) is None else 'uvloop'}" for s in systems)


def run_on_its_loop(system: str, main: Coroutine[Any, Any, Any], bridge_config: dict[str, Any] | None = None) -> Any:
    """Run a child's ``main`` on the loop ``system``'s own CLI would run its worker on."""
    with asyncio.Runner(loop_factory=loop_factory(system, bridge_config)) as runner:
        return runner.run(main)


class Recorder:
    """What the handlers saw: counts, latencies since the last report, job ids."""

    def __init__(self, keep_ids: bool) -> None:
        self.handled = 0
        self.since = 0
        self.latencies: list[float] = []
        self.ids: array.array[int] | None = array.array("q") if keep_ids else None

    def record(self, job_id: int, t: float | None) -> None:
        self.handled += 1
        self.since += 1
        if t:
            self.latencies.append(time.time() - t)
        if self.ids is not None:
            self.ids.append(job_id)

    def report(self) -> dict[str, Any]:
        # Milliseconds to the microsecond keep a minute of samples at a high rate one short line.
        out = {"handled": self.since, "latencies": [round(x * 1000, 3) for x in self.latencies]}
        self.since = 0
        self.latencies = []
        return out


def make_worker(
    system: str, url: str, concurrency: int, rec: Recorder, bridge_config: dict[str, Any]
) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """The (start, stop) pair of one system's worker, handlers recording into ``rec``."""
    if system == "awa_bridge":
        from awa_bridge.worker.client import Client
        from awa_bridge.worker.config import QueueConfig

        client = Client(url, **bridge_config)

        @client.task(KIND, queue=QUEUE)
        async def bridge_noop(job: Any) -> None:
            rec.record(job.id, job.args.get("t"))

        async def start() -> None:
            await client.start([QueueConfig(QUEUE, max_workers=concurrency)])

        async def stop() -> None:
            await client.shutdown()

        return start, stop

    if system == "pgqueuer":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        runner: dict[str, Any] = {}

        async def pgq_start() -> None:
            conn = await asyncpg.connect(url)
            qm = QueueManager(Queries(AsyncpgDriver(conn)))

            @qm.entrypoint(KIND)
            async def pgq_noop(job: Any) -> None:
                rec.record(int(job.id), json.loads(job.payload).get("t"))

            batch = max(1, min(PGQUEUER_BATCH, concurrency // 2))
            runner.update(conn=conn, qm=qm)
            runner["task"] = asyncio.create_task(qm.run(batch_size=batch, max_concurrent_tasks=concurrency))

        async def pgq_stop() -> None:
            runner["qm"].shutdown.set()
            await runner["task"]
            await runner["conn"].close()

        return pgq_start, pgq_stop

    if system == "procrastinate":
        import procrastinate

        logging.getLogger("procrastinate").setLevel(logging.ERROR)
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=PROCRASTINATE_POOL)
        )

        @app.task(name=KIND, queue=QUEUE, pass_context=True)
        async def proc_noop(context: Any, i: int = 0, t: float = 0.0) -> None:
            rec.record(int(context.job.id), t)

        tasks: dict[str, asyncio.Task[None]] = {}

        async def proc_start() -> None:
            await app.open_async()
            tasks["worker"] = asyncio.create_task(
                app.run_worker_async(queues=[QUEUE], concurrency=concurrency, wait=True, install_signal_handlers=False)
            )

        async def proc_stop() -> None:
            tasks["worker"].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tasks["worker"]
            await app.close_async()

        return proc_start, proc_stop

    raise SystemExit(f"unknown system {system!r} (choose from {', '.join(CHILD_SYSTEMS)})")


async def child_main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    rec = Recorder(keep_ids=bool(args.ledger))
    start, stop = make_worker(args.system, args.url, args.concurrency, rec, json.loads(args.bridge_config or "{}"))
    if args.system == "awa_bridge":
        from awa_bridge.worker import tune_gc

        tune_gc()  # what Client.run() does in a worker process (python -m awa_bridge worker, manage.py awa_worker)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("READY", flush=True)
    while True:
        command = (await reader.readline()).decode().strip()
        if command == "GO":
            await start()
            print("STARTED", flush=True)
        elif command == "STATS":
            print("STATS", json.dumps(rec.report()), flush=True)
        elif command in ("STOP", ""):
            await stop()
            if args.ledger and rec.ids is not None:
                with open(args.ledger, "wb") as f:
                    rec.ids.tofile(f)
            print("RESULT", json.dumps({"handled": rec.handled}), flush=True)
            return


# -- how a benchmark stops and fails ----------------------------------------------------

INTERRUPTED = "interrupted: workers stopped, databases dropped"
_terminated = False  # SIGTERM arrived
_delivered = False  # and its stop was made (``_interrupt`` ran)


def _sigterm_as_ctrl_c(signum: int, frame: Any) -> None:
    """SIGTERM does what Ctrl-C does, at a point where stopping is safe.

    A Python signal handler runs between any two bytecodes: inside a C extension's callback
    (asyncpg's protocol part way through a reply) or between ``CREATE DATABASE`` and the line that
    records the database for dropping. Raising ``KeyboardInterrupt`` there (what happens when
    SIGINT is ignored, as in a shell's background job, CI's included) left a database behind or
    crashed the process with SIGSEGV. So under a running event loop the stop is handed to the loop
    and made between two callbacks; without one, here (plain code, nothing asynchronous half done).

    A loop that was in its last round when the signal came closes without running that callback:
    then another SIGTERM stops the script again, and ``run_main`` reports the stop either way.
    """
    global _terminated
    if _delivered:  # a second ``kill`` must not cut the clean-up short
        return
    _terminated = True
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop running in this thread
        _interrupt()
    else:
        loop.call_soon_threadsafe(_interrupt)


def _interrupt() -> None:
    """Ctrl-C's effect, once: ``asyncio.run``'s SIGINT handler cancels its main task, so every
    ``finally`` (awaits included) runs before ``KeyboardInterrupt`` comes out of ``asyncio.run``. Where
    SIGINT is ignored asyncio installs no handler, and ``KeyboardInterrupt`` raised from a loop
    callback comes out of the loop, whose runner then cancels the main task and runs the same
    ``finally`` blocks."""
    global _delivered
    if _delivered:  # two signals queued two calls: asyncio's handler would take the second as "stop now"
        return
    _delivered = True
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, None)


def run_main(main: Callable[[], int | None], interrupted: str = INTERRUPTED) -> NoReturn:
    """Exit with ``main()``'s status; Ctrl-C or SIGTERM stops it cleanly.

    Either one runs the script's clean-up (workers stopped, databases dropped; an embedded
    server stops at exit), then prints ``interrupted`` as one line to stderr, no traceback, and
    exits 130 (Ctrl-C) or 143 (SIGTERM), the statuses a shell gives a process killed by them; also
    when a SIGTERM's stop was lost on the way (see ``_sigterm_as_ctrl_c``) and ``main()`` ended on
    its own. A crash in a C extension (a segfault) prints every thread's Python stack to stderr
    first, so that a rare one seen once in CI says where it happened.
    """
    faulthandler.enable()
    signal.signal(signal.SIGTERM, _sigterm_as_ctrl_c)
    try:
        status = main()
        stopped = _terminated
    except KeyboardInterrupt:
        stopped = True
    if stopped:
        print(interrupted, file=sys.stderr)
        status = 143 if _terminated else 130
    sys.exit(status)


def require_positive(parser: argparse.ArgumentParser, args: argparse.Namespace, *options: str) -> None:
    """``parser.error`` (exit 2) naming the first of ``options`` (``"--rows"``, ``"-n"``) below 1."""
    for option in options:
        if getattr(args, option.lstrip("-").replace("-", "_")) < 1:
            parser.error(f"{option} must be at least 1")


def without_password(url: str) -> str:
    """``url`` (or a ``key=value`` connection string) with any password shown as ``***``."""
    url = re.sub(r"^([a-z][a-z0-9+.-]*://[^:/@?#]*):[^@/?#]*@", r"\1:***@", url, flags=re.I)
    return re.sub(r"(password\s*=\s*)[^\s&]+", r"\1***", url, flags=re.I)


def check_server(url: str) -> None:
    """Exit 2 with one line on stderr naming ``url`` and why, unless a connection to it opens."""
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=10).close()
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        with contextlib.suppress(ValueError):
            password = urlsplit(url).password
            reason = reason.replace(password, "***") if password else reason
        print(f"{os.path.basename(sys.argv[0])}: cannot connect to {without_password(url)}: {reason}", file=sys.stderr)
        sys.exit(2)


def server(url: str | None) -> tuple[str, Any, str]:
    """The server a benchmark runs on: ``(url, embedded, where)``.

    With a URL, the URL once a connection to it opens (else one line and exit 2,
    ``check_server``) and ``embedded`` None. Without one, an embedded PostgreSQL
    started for this run, which stops (its data deleted) when the process exits:
    the caller keeps ``embedded`` referenced until then. ``where`` names the
    server for the report's heading.
    """
    if url:
        check_server(url)
        parts = urlsplit(url)
        return url, None, f"PostgreSQL at {parts.hostname or 'socket'}:{parts.port or 5432}"
    from awa_bridge.embedded import start_embedded

    print("no --database-url / DATABASE_URL: starting an embedded PostgreSQL", file=sys.stderr)
    embedded = start_embedded()
    return embedded.get_uri("postgres"), embedded, "embedded PostgreSQL"


# -- parent side ----------------------------------------------------------------------


class Worker:
    """One worker subprocess (this file), driven over stdin/stdout; stderr goes to a temp log."""

    def __init__(
        self,
        system: str,
        url: str,
        concurrency: int,
        *,
        bridge_config: dict[str, Any] | None = None,
        ledger: bool = False,
    ) -> None:
        self.system = system
        self.url = url
        self.concurrency = concurrency
        self.bridge_config = bridge_config or {}
        self.proc: asyncio.subprocess.Process | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench_{system}_", suffix=".log", delete=False)  # noqa: SIM115
        self.ledger = self.log.name[: -len(".log")] + ".ids" if ledger else None

    async def spawn(self, timeout: float = 60) -> None:
        argv = [
            sys.executable,
            os.path.abspath(__file__),
            "--system",
            self.system,
            "--url",
            self.url,
            "--concurrency",
            str(self.concurrency),
            "--bridge-config",
            json.dumps(self.bridge_config),
        ]
        if self.ledger:
            argv += ["--ledger", self.ledger]
        self.proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log,
            limit=STDOUT_LINE_LIMIT,
            # Ctrl-C reaches the parent only, which stops its children in order;
            # if the parent dies, the child sees end of input and stops too.
            start_new_session=True,
        )
        await self.expect("READY", timeout)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def send(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        await self.proc.stdin.drain()

    async def expect(self, word: str, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            if not raw:
                raise RuntimeError(f"{self.system} worker exited before {word}: {self.tail()}")
            line = raw.decode().strip()
            if line.startswith(word):
                return line[len(word) :].strip()

    async def start(self, timeout: float = 60) -> None:
        await self.send("GO")
        await self.expect("STARTED", timeout)

    async def stats(self, timeout: float = 30) -> dict[str, Any]:
        await self.send("STATS")
        result: dict[str, Any] = json.loads(await self.expect("STATS", timeout))
        return result

    async def stop(self, timeout: float = 60) -> int:
        """Stop the worker; the number of jobs it handled in all."""
        await self.send("STOP")
        payload = json.loads(await self.expect("RESULT", timeout))
        assert self.proc is not None
        await asyncio.wait_for(self.proc.wait(), timeout)
        return int(payload["handled"])

    def ids(self) -> array.array[int]:
        """The ids of the jobs this worker handled (after ``stop``)."""
        out = array.array("q")
        if self.ledger and os.path.exists(self.ledger):
            with open(self.ledger, "rb") as f:
                out.frombytes(f.read())
        return out

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    def tail(self) -> str:
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()[-2000:]

    def cleanup(self) -> None:
        self.log.close()
        for path in (self.log.name, self.ledger):
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="A benchmark worker child (started by bench_soak.py and bench_scale.py)."
    )
    parser.add_argument("--system", required=True, choices=CHILD_SYSTEMS)
    parser.add_argument("--url", required=True, help="the database the worker runs on")
    parser.add_argument("--concurrency", type=int, default=100, help="handlers at once (default 100)")
    parser.add_argument("--ledger", help="file for the ids of the jobs handled (written at STOP)")
    parser.add_argument("--bridge-config", help="WorkerConfig overrides for awa_bridge, as JSON")
    args = parser.parse_args(argv)
    run_on_its_loop(args.system, child_main(args), json.loads(args.bridge_config or "{}"))


if __name__ == "__main__":
    main()
