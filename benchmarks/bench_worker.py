"""Worker benchmark: awa_bridge's worker side by side with peer job queues.

One run, one PostgreSQL server. Each system gets its own throwaway database:
its schema is installed once into a template database, and every measurement
runs on a fresh copy of that template (``CREATE DATABASE ... TEMPLATE``), so
every run of every system starts from the same empty, freshly analysed state.
All of them are dropped at the end.

Every worker runs in its own subprocess (this file with ``--child``), so one
system's threads or event loop never slow another, and its memory and CPU can
be read from outside. The parent measures from the database side.

* drain: N no-op jobs are enqueued in bulk before the worker starts; the
  clock runs from the moment the parent tells the child to start its worker
  until the parent's polling (every 20 ms, own connection; a probe for any
  unfinished job, which stops at the first) sees all N finished. Rates in
  jobs/s per concurrency, best of them, and the worker process's peak RSS
  (VmHWM) over its run.
* pickup latency: the parent inserts single jobs, each in its own committed
  transaction, at a fixed rate; each job carries ``time.time()`` taken just
  before its insert, and the handler records ``time.time() - t`` when it
  starts (same machine, same clock). Reported: p50/p95/p99 in ms, and the
  parent's own insert round trip p50 (included in the pickup figures).
* idle CPU: every worker started with nothing to do, all at once, for a fixed
  window; CPU seconds (user + system) of each worker process over the window.

    python benchmarks/bench_worker.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Without ``--database-url`` it uses ``$DATABASE_URL``, else an embedded server
(``awa_bridge.embedded``). Peers that are not installed are skipped with a
note (see requirements.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import bench_procs as bp

KIND = "noop"
QUEUE = "bench"
POLL_SECONDS = 0.02
SYSTEMS = ("awa_bridge", "awa-pg", "pgqueuer", "procrastinate")
DISTRIBUTIONS = {
    "awa_bridge": "awa-bridge",
    "awa-pg": "awa-pg",
    "pgqueuer": "pgqueuer",
    "procrastinate": "procrastinate",
}
# pgqueuer's batch_size (its default, 10, drains 2-4x slower here); capped at
# concurrency / 2 (its rule: max_concurrent_tasks >= 2 x batch_size).
PGQUEUER_BATCH = 100
PROCRASTINATE_POOL = 10
AWA_PG_POOL = 10  # awa-pg's default max_connections


@dataclass
class Noop:
    """awa-pg's args type for the ``noop`` kind (``t``: enqueue time, 0 = not timed)."""

    i: int
    t: float = 0.0


# -- URLs and databases ----------------------------------------------------------


def with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


def awa_pg_url(url: str) -> str:
    """The same database in a form awa-pg's URL parser (sqlx) accepts.

    sqlx rejects an empty host with ``?host=/socket/dir`` (the embedded
    server's form); the socket directory percent-encoded as the host works.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    socket_dir = next((value for key, value in query if key == "host" and value.startswith("/")), None)
    if socket_dir is None or parts.hostname:
        return url
    userinfo = quote(parts.username or "", safe="")
    if parts.password:
        userinfo += ":" + quote(parts.password, safe="")
    netloc = (userinfo + "@" if userinfo else "") + quote(socket_dir, safe="")
    if parts.port:
        netloc += f":{parts.port}"
    rest = urlencode([(key, value) for key, value in query if key != "host"])
    return urlunsplit(parts._replace(netloc=netloc, query=rest))


class Databases:
    """Template and run databases on one server, all dropped by ``drop_all``."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.prefix = f"awa_benchw_{os.getpid()}"
        self.made: list[str] = []
        self.runs = 0

    def _admin(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(self.server_url, autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)

    def template(self, system: str) -> str:
        name = f"{self.prefix}_{system.replace('-', '_')}"
        self.made.append(name)  # before it exists: a stop mid-CREATE still drops it
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        return name

    def copy(self, template: str) -> str:
        """A fresh database cloned from ``template``; returns its name."""
        import psycopg

        self.runs += 1
        name = f"{template}_r{self.runs}"
        self.made.append(name)
        for attempt in range(50):
            try:
                self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
                break
            except psycopg.errors.ObjectInUse:  # a connection to the template is still closing
                if attempt == 49:
                    raise
                time.sleep(0.1)
        return name

    def drop(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        with contextlib.suppress(ValueError):
            self.made.remove(name)

    def drop_all(self) -> None:
        for name in list(reversed(self.made)):
            with contextlib.suppress(Exception):
                self.drop(name)

    def url(self, name: str) -> str:
        return with_dbname(self.server_url, name)


# -- the systems, parent side ------------------------------------------------------


@dataclass
class System:
    """How the parent installs, fills and watches one system's database."""

    name: str
    install: Callable[[str], Awaitable[None]]
    enqueue_bulk: Callable[[str, int], Awaitable[None]]
    # opens an inserter: returns (insert(i, t), close)
    single_inserter: Callable[
        [str], Awaitable[tuple[Callable[[int, float], Awaitable[Any]], Callable[[], Awaitable[Any]]]]
    ]
    remaining_sql: str  # jobs not finished yet
    analyze: str  # tables to ANALYZE after a bulk enqueue
    enqueue_api: str = ""  # for the report


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _available(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def bridge_system() -> System:
    import asyncpg
    import psycopg

    import awa_bridge

    async def install(url: str) -> None:
        await asyncio.to_thread(awa_bridge.migrate, url)

    async def enqueue_bulk(url: str, n: int) -> None:
        def copy() -> None:
            with psycopg.connect(url) as conn:
                awa_bridge.insert_many_sync(conn, [{"i": i} for i in range(n)], kind=KIND, queue=QUEUE)
                conn.commit()

        await asyncio.to_thread(copy)

    async def single_inserter(url: str) -> Any:
        conn = await asyncpg.connect(url)

        async def insert(i: int, t: float) -> Any:
            return await awa_bridge.insert_job(conn, {"i": i, "t": t}, kind=KIND, queue=QUEUE)

        return insert, conn.close

    return System(
        "awa_bridge",
        install,
        enqueue_bulk,
        single_inserter,
        f"SELECT count(*) FROM awa.jobs WHERE queue = '{QUEUE}' AND state IN ('available', 'running')",
        "awa.jobs",
        "insert_many_sync (COPY) / insert_job (asyncpg)",
    )


def awa_pg_system() -> System:
    import awa

    async def install(url: str) -> None:
        await awa.migrate(awa_pg_url(url))

    async def enqueue_bulk(url: str, n: int) -> None:
        client = awa.AsyncClient(awa_pg_url(url), max_connections=2)
        try:
            await client.insert_many_copy([Noop(i) for i in range(n)], kind=KIND, queue=QUEUE)
        finally:
            await client.close()

    async def single_inserter(url: str) -> Any:
        client = awa.AsyncClient(awa_pg_url(url), max_connections=1)

        async def insert(i: int, t: float) -> Any:
            return await client.insert(Noop(i, t), kind=KIND, queue=QUEUE)

        return insert, client.close

    return System(
        "awa-pg",
        install,
        enqueue_bulk,
        single_inserter,
        f"SELECT count(*) FROM awa.jobs_hot WHERE queue = '{QUEUE}' AND state IN ('available', 'running')",
        "awa.jobs_hot",
        "insert_many_copy / AsyncClient.insert",
    )


def pgqueuer_system() -> System:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    async def install(url: str) -> None:
        conn = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    async def enqueue_bulk(url: str, n: int) -> None:
        conn = await asyncpg.connect(url)
        try:
            queries = Queries(AsyncpgDriver(conn))
            for start in range(0, n, 5000):
                count = min(5000, n - start)
                payloads = [json.dumps({"i": i}).encode() for i in range(start, start + count)]
                await queries.enqueue([KIND] * count, payloads, [0] * count)
        finally:
            await conn.close()

    async def single_inserter(url: str) -> Any:
        conn = await asyncpg.connect(url)
        queries = Queries(AsyncpgDriver(conn))

        async def insert(i: int, t: float) -> Any:
            return await queries.enqueue(KIND, json.dumps({"i": i, "t": t}).encode())

        return insert, conn.close

    return System(
        "pgqueuer",
        install,
        enqueue_bulk,
        single_inserter,
        "SELECT count(*) FROM pgqueuer",  # finished jobs are deleted (and logged)
        "pgqueuer",
        "Queries.enqueue (lists / single)",
    )


def procrastinate_system() -> System:
    import procrastinate

    def app_for(url: str) -> Any:
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=2))
        app.task(name=KIND, queue=QUEUE)(_procrastinate_noop)
        return app

    async def install(url: str) -> None:
        app = app_for(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def enqueue_bulk(url: str, n: int) -> None:
        app = app_for(url)
        async with app.open_async():
            task = app.tasks[KIND]
            for start in range(0, n, 5000):
                await task.batch_defer_async(*({"i": i} for i in range(start, min(n, start + 5000))))

    async def single_inserter(url: str) -> Any:
        app = app_for(url)
        await app.open_async()
        task = app.tasks[KIND]

        async def insert(i: int, t: float) -> Any:
            return await task.defer_async(i=i, t=t)

        return insert, app.close_async

    return System(
        "procrastinate",
        install,
        enqueue_bulk,
        single_inserter,
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        "procrastinate_jobs",
        "batch_defer_async / defer_async",
    )


async def _procrastinate_noop(i: int = 0, t: float = 0.0) -> None:
    return None


# -- the worker subprocesses ---------------------------------------------------------


class Child:
    """One worker subprocess, driven over stdin/stdout (READY, GO/STARTED, STOP/RESULT)."""

    def __init__(self, system: str, url: str, concurrency: int) -> None:
        self.system = system
        self.url = url
        self.concurrency = concurrency
        self.proc: asyncio.subprocess.Process | None = None
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench_worker_{system}_", suffix=".log", delete=False)  # noqa: SIM115

    async def spawn(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            self.system,
            "--child-url",
            self.url,
            "--child-concurrency",
            str(self.concurrency),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log,
            # Ctrl-C reaches the parent only, which stops its children itself (as bench_procs.Worker).
            start_new_session=True,
        )
        await self.expect("READY", 60)

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

    async def start(self) -> float:
        """Tell the child to start its worker; the send time (perf_counter)."""
        started = time.perf_counter()
        await self.send("GO")
        return started

    async def stop(self, timeout: float = 60) -> Any:
        await self.send("STOP")
        payload = await self.expect("RESULT", timeout)
        assert self.proc is not None
        await asyncio.wait_for(self.proc.wait(), timeout)
        return json.loads(payload)

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
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident set (VmHWM), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss / 2**20  # current, not peak
    except Exception:
        return None


async def backends_cpu(conn: Any) -> float | None:
    """CPU seconds used so far by the other backends connected to ``conn``'s database.

    The worker's connections are opened when it starts, so at the end of a run
    this is what the server spent serving it (WAL writer, autovacuum and the
    like excluded). Needs the server on this machine; None otherwise.
    """
    import psutil

    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    total = 0.0
    try:
        for row in rows:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = psutil.Process(row["pid"]).cpu_times()
                total += times.user + times.system
    except psutil.AccessDenied:
        return None
    if rows and total == 0.0:
        return None  # most likely not this machine's processes
    return total


def cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def child_main(system: str, url: str, concurrency: int) -> None:
    """The worker process: set up, then obey GO / STOP from the parent."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    latencies: list[float] = []

    def record(t: float | None) -> None:
        if t:
            latencies.append(time.time() - t)

    start: Callable[[], Awaitable[Any]]
    stop: Callable[[], Awaitable[Any]]

    if system == "awa_bridge":
        # The drivers the worker uses, imported before GO as the peers' branches import theirs
        # (awa_bridge imports them lazily, at the worker's start).
        import asyncpg
        import psycopg  # noqa: F401

        from awa_bridge.worker.client import Client
        from awa_bridge.worker.config import QueueConfig

        client = Client(url, **_bridge_config())

        @client.task(KIND, queue=QUEUE)
        async def bridge_noop(job: Any) -> None:
            record(job.args.get("t"))

        async def start() -> None:
            await client.start([QueueConfig(QUEUE, max_workers=concurrency)])

        stop = client.shutdown

    elif system == "awa-pg":
        import awa

        awa_client = awa.AsyncClient(awa_pg_url(url), max_connections=AWA_PG_POOL)

        @awa_client.task(Noop, kind=KIND, queue=QUEUE)
        async def awa_noop(job: Any) -> None:
            record(job.args.t)

        async def start() -> None:
            await awa_client.start([(QUEUE, concurrency)])

        async def stop() -> None:
            await awa_client.shutdown()
            await awa_client.close()

    elif system == "pgqueuer":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        runner: dict[str, Any] = {}

        async def start() -> None:
            conn = await asyncpg.connect(url)
            qm = QueueManager(Queries(AsyncpgDriver(conn)))

            @qm.entrypoint(KIND)
            async def pgq_noop(job: Any) -> None:
                record(json.loads(job.payload).get("t"))

            wanted = int(os.environ.get("BENCH_WORKER_PGQUEUER_BATCH") or PGQUEUER_BATCH)
            batch = max(1, min(wanted, concurrency // 2))
            runner.update(conn=conn, qm=qm)
            runner["task"] = asyncio.create_task(qm.run(batch_size=batch, max_concurrent_tasks=concurrency))

        async def stop() -> None:
            runner["qm"].shutdown.set()
            await runner["task"]
            await runner["conn"].close()

    elif system == "procrastinate":
        import procrastinate

        logging.getLogger("procrastinate").setLevel(logging.ERROR)
        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=PROCRASTINATE_POOL)
        )

        @app.task(name=KIND, queue=QUEUE)
        async def proc_noop(i: int = 0, t: float = 0.0) -> None:
            record(t)

        runner = {}

        async def start() -> None:
            await app.open_async()
            runner["task"] = asyncio.create_task(
                app.run_worker_async(queues=[QUEUE], concurrency=concurrency, wait=True, install_signal_handlers=False)
            )

        async def stop() -> None:
            runner["task"].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner["task"]
            await app.close_async()

    else:
        raise SystemExit(f"unknown system {system!r}")

    if system == "awa_bridge":
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
        elif command in ("STOP", ""):
            await stop()
            print("RESULT", json.dumps(latencies), flush=True)
            return


# -- measurements -------------------------------------------------------------------


@dataclass
class Drain:
    rate: float
    seconds: float
    finished: int
    rss_mb: float | None
    cpu: float  # CPU seconds the worker process used during the run
    db_cpu: float | None  # CPU seconds of the worker's server backends (a local server only)
    timed_out: bool = False


@dataclass
class Latency:
    p50: float
    p95: float
    p99: float
    count: int
    sent: int
    insert_p50: float


@dataclass
class Result:
    drains: dict[int, Drain] = field(default_factory=dict)
    latency: Latency | None = None
    idle_cpu: float | None = None
    errors: list[str] = field(default_factory=list)


async def poll_remaining(conn: Any, sql: str) -> int:
    return int(await conn.fetchval(sql))


def any_left(count_sql: str) -> str:
    """``SELECT count(*) FROM ...`` as a probe that stops at the first row (0 or 1).

    The drain's poll runs every 20 ms while the worker works: counting every
    unfinished job each time (tens of thousands of index entries, the dead ones
    of finished jobs among them) took a share of the server that the worker
    being measured did not get, for every system alike.
    """
    prefix = "SELECT count(*) FROM "
    assert count_sql.startswith(prefix), count_sql
    return f"SELECT count(*) FROM (SELECT 1 FROM {count_sql[len(prefix) :]} LIMIT 1) AS left_"


async def measure_drain(system: System, url: str, n: int, concurrency: int, timeout: float) -> Drain:
    import asyncpg

    await system.enqueue_bulk(url, n)
    conn = await asyncpg.connect(url)
    child = Child(system.name, url, concurrency)
    try:
        await conn.execute(f"ANALYZE {system.analyze}")
        remaining = await poll_remaining(conn, system.remaining_sql)
        if remaining != n:
            raise RuntimeError(f"expected {n} queued jobs, found {remaining}")
        await child.spawn()
        cpu_before = cpu_seconds(child.pid)
        started = await child.start()
        deadline = started + timeout
        probe = any_left(system.remaining_sql)
        while True:
            left = await poll_remaining(conn, probe)
            now = time.perf_counter()
            if left == 0 or now > deadline:
                break
            await asyncio.sleep(POLL_SECONDS)
        elapsed = now - started
        rss = peak_rss_mb(child.pid)
        cpu = cpu_seconds(child.pid) - cpu_before
        db_cpu = await backends_cpu(conn)
        remaining = await poll_remaining(conn, system.remaining_sql) if left else 0
        await child.stop()
        finished = n - remaining
        return Drain(finished / elapsed, elapsed, finished, rss, cpu, db_cpu, timed_out=remaining > 0)
    finally:
        await child.kill()
        child.cleanup()
        await conn.close()


async def measure_latency(
    system: System, url: str, rate: float, seconds: float, concurrency: int, warmup: float
) -> Latency:
    import asyncpg

    conn = await asyncpg.connect(url)
    insert, close = await system.single_inserter(url)
    child = Child(system.name, url, concurrency)
    inserts: list[float] = []
    try:
        await child.spawn()
        await child.start()
        await child.expect("STARTED", 30)
        await asyncio.sleep(1.0)  # let pools, listeners and first polls settle
        interval = 1.0 / rate
        total = int(rate * (warmup + seconds))
        timed_from = int(rate * warmup)
        begin = time.perf_counter()
        for i in range(total):
            delay = begin + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.time() if i >= timed_from else 0.0  # warm-up jobs carry t = 0: not recorded
            t0 = time.perf_counter()
            await insert(i, t)
            if i >= timed_from:
                inserts.append(time.perf_counter() - t0)
        deadline = time.perf_counter() + 10
        while await poll_remaining(conn, system.remaining_sql) and time.perf_counter() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        samples = sorted(s * 1000 for s in await child.stop())
    finally:
        await close()
        await child.kill()
        child.cleanup()
        await conn.close()
    if not samples:
        raise RuntimeError("no job was picked up")
    return Latency(
        percentile(samples, 50),
        percentile(samples, 95),
        percentile(samples, 99),
        len(samples),
        total - timed_from,
        statistics.median(inserts) * 1000,
    )


def percentile(ordered: list[float], p: float) -> float:
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def measure_idle(systems: list[tuple[System, str]], seconds: float, concurrency: int) -> dict[str, float]:
    """Start every worker with an empty queue at once; CPU seconds each used over ``seconds``."""
    children = [Child(system.name, url, concurrency) for system, url in systems]
    try:
        for child in children:
            await child.spawn()
        for child in children:
            await child.start()
            await child.expect("STARTED", 30)
        await asyncio.sleep(2.0)  # past start-up work (pools, first polls, leader election)
        before = {child.system: cpu_seconds(child.pid) for child in children}
        await asyncio.sleep(seconds)
        used = {child.system: cpu_seconds(child.pid) - before[child.system] for child in children}
        for child in children:
            await child.stop()
        return used
    finally:
        for child in children:
            await child.kill()
            child.cleanup()


# -- the run ------------------------------------------------------------------------


def load_systems(wanted: list[str], notes: list[str]) -> list[System]:
    loaders: dict[str, tuple[list[str], Callable[[], System]]] = {
        "awa_bridge": (["asyncpg", "psycopg"], bridge_system),
        "awa-pg": (["awa"], awa_pg_system),
        "pgqueuer": (["pgqueuer", "asyncpg"], pgqueuer_system),
        "procrastinate": (["procrastinate"], procrastinate_system),
    }
    systems = []
    for name in wanted:
        modules, loader = loaders[name]
        missing = [m for m in modules if not _available(m)]
        if missing:
            notes.append(f"{name}: skipped, not installed ({', '.join(missing)}); see benchmarks/requirements.txt")
            continue
        systems.append(loader())
    return systems


async def run(args: argparse.Namespace, server_url: str) -> tuple[dict[str, Result], list[str], list[System]]:
    import asyncpg

    notes: list[str] = []
    systems = load_systems(args.systems, notes)
    results = {s.name: Result() for s in systems}
    dbs = Databases(server_url)
    templates: dict[str, str] = {}

    async def fresh(system: System) -> str:
        return dbs.copy(templates[system.name])

    try:
        for system in list(systems):
            name = dbs.template(system.name)
            try:
                await system.install(dbs.url(name))
            except Exception as exc:
                notes.append(f"{system.name}: skipped, schema install failed: {exc}")
                systems.remove(system)
                continue
            templates[system.name] = name
        # Let connections to the templates close before they are copied.
        conn = await asyncpg.connect(server_url)
        for _ in range(100):
            busy = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY($1::text[])", list(templates.values())
            )
            if not busy:
                break
            await asyncio.sleep(0.1)
        await conn.close()

        # 1. drain: concurrencies in the outer loop, so slow drift hits every system alike
        for concurrency in args.concurrency:
            for system in systems:
                name = await fresh(system)
                try:
                    n = min(args.jobs, args.procrastinate_jobs) if system.name == "procrastinate" else args.jobs
                    drain = await measure_drain(system, dbs.url(name), n, concurrency, args.drain_timeout)
                    results[system.name].drains[concurrency] = drain
                    print(
                        f"  drain  {system.name:<14} c={concurrency:<4} {drain.rate:>8.0f} jobs/s"
                        f"  ({drain.finished} in {drain.seconds:.2f} s, worker CPU {drain.cpu:.2f} s,"
                        f" its server backends' CPU {drain.db_cpu or 0:.2f} s"
                        f"{', TIMEOUT' if drain.timed_out else ''})",
                        file=sys.stderr,
                        flush=True,
                    )
                except Exception as exc:
                    results[system.name].errors.append(f"drain c={concurrency}: {exc}")
                    print(f"  drain  {system.name:<14} c={concurrency:<4} FAILED: {exc}", file=sys.stderr, flush=True)
                finally:
                    dbs.drop(name)

        # 2. pickup latency
        for system in systems:
            name = await fresh(system)
            try:
                latency = await measure_latency(
                    system, dbs.url(name), args.rate, args.latency_seconds, args.latency_concurrency, 0.5
                )
                results[system.name].latency = latency
                print(
                    f"  pickup {system.name:<14} p50 {latency.p50:.1f} ms  p95 {latency.p95:.1f} ms"
                    f"  p99 {latency.p99:.1f} ms  ({latency.count}/{latency.sent})",
                    file=sys.stderr,
                    flush=True,
                )
            except Exception as exc:
                results[system.name].errors.append(f"latency: {exc}")
                print(f"  pickup {system.name:<14} FAILED: {exc}", file=sys.stderr, flush=True)
            finally:
                dbs.drop(name)

        # 3. idle CPU, every worker at once (each on its own empty database)
        idle_systems = systems if args.idle_peers else [s for s in systems if s.name == "awa_bridge"]
        if idle_systems and args.idle_seconds > 0:
            names = {s.name: await fresh(s) for s in idle_systems}
            try:
                used = await measure_idle(
                    [(s, dbs.url(names[s.name])) for s in idle_systems], args.idle_seconds, args.latency_concurrency
                )
                for system_name, seconds in used.items():
                    results[system_name].idle_cpu = seconds
            except Exception as exc:
                notes.append(f"idle CPU: failed: {exc}")
            finally:
                for name in names.values():
                    dbs.drop(name)
    finally:
        dbs.drop_all()
    return results, notes, systems


def fmt_rate(drain: Drain | None) -> str:
    if drain is None:
        return "failed"
    return f"{drain.rate:,.0f}" + (" (timeout)" if drain.timed_out else "")


def per_job_us(seconds: float | None, drain: Drain) -> str:
    return "-" if seconds is None or not drain.finished else f"{1e6 * seconds / drain.finished:.0f}"


SETTINGS = {
    "awa_bridge": "defaults (claim_batch 200, completion_flush 2 ms, poll 1 s, NOTIFY), its process's GC tuned "
    "as Client.run() tunes it",
    "awa-pg": "defaults (poll_interval_ms 200, NOTIFY), queue (name, c)",
    "pgqueuer": "max_concurrent_tasks c, batch_size min({batch}, c/2), NOTIFY",
    "procrastinate": f"concurrency c, psycopg pool of {PROCRASTINATE_POOL}, listen_notify, {{jobs}} jobs per drain",
}


def report(
    args: argparse.Namespace, server: str, results: dict[str, Result], notes: list[str], systems: list[System]
) -> str:
    lines: list[str] = []
    versions = ", ".join(f"{s} {_version(DISTRIBUTIONS[s])}" for s in results)
    lines.append(f"# Worker benchmark ({server})")
    lines.append("")
    lines.append(
        f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; {versions}. "
        "Each worker in its own process, each system on its own database; no-op async handlers; "
        f"event loops (as each system's own CLI runs its worker): {bp.loop_names(list(results), _bridge_config())}. "
        f"Load average at start {LOAD_AT_START}, at end {_loadavg()}."
    )
    lines.append("")
    conc = args.concurrency
    lines.append(f"## Drain: {args.jobs:,} pre-enqueued no-op jobs, jobs/s (higher is better)")
    lines.append("")
    lines.append(
        "| system | "
        + " | ".join(f"c={c}" for c in conc)
        + " | best | x awa-pg | worker CPU us/job | server CPU us/job | peak RSS MiB |"
    )
    lines.append("|---|" + "---:|" * (len(conc) + 5))
    best_runs = {
        name: max((d for d in r.drains.values() if not d.timed_out), key=lambda d: d.rate, default=None)
        for name, r in results.items()
    }
    ref = best_runs.get("awa-pg")
    for name, r in results.items():
        cells = [fmt_rate(r.drains.get(c)) for c in conc]
        best = best_runs[name]
        rss = max((d.rss_mb for d in r.drains.values() if d.rss_mb is not None), default=None)
        if best is None:
            tail = ["-", "-", "-", "-"]
        else:
            tail = [
                f"**{best.rate:,.0f}**",
                f"{best.rate / ref.rate:.2f}" if ref is not None else "-",
                per_job_us(best.cpu, best),
                per_job_us(best.db_cpu, best),
            ]
        tail.append(f"{rss:.0f}" if rss is not None else "-")
        lines.append(f"| {name} | " + " | ".join(cells + tail) + " |")
    lines.append("")
    lines.append(
        "Clock: from telling the worker process to start until the parent's poll (every "
        f"{POLL_SECONDS * 1000:.0f} ms) sees every job finished. CPU per job is from the best run: "
        "the worker process, and the server backends it connected (a local server only)."
    )
    lines.append("")
    lines.append(
        f"## Pickup latency: single committed inserts at {args.rate:g} jobs/s for {args.latency_seconds:g} s, "
        f"concurrency {args.latency_concurrency}, ms (lower is better)"
    )
    lines.append("")
    lines.append("| system | p50 | p95 | p99 | picked up | insert p50 (included) |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        lat = r.latency
        if lat is None:
            lines.append(f"| {name} | failed | | | | |")
        else:
            lines.append(
                f"| {name} | {lat.p50:.1f} | {lat.p95:.1f} | {lat.p99:.1f} | {lat.count}/{lat.sent} | "
                f"{lat.insert_p50:.1f} |"
            )
    lines.append("")
    lines.append(
        "From `time.time()` just before the insert (the job carries it) to the handler's start; "
        "the parent's own insert round trip is part of it."
    )
    idle = {name: r.idle_cpu for name, r in results.items() if r.idle_cpu is not None}
    if idle:
        lines.append("")
        lines.append(
            f"## Idle CPU: workers started with empty queues (all at once), CPU seconds over "
            f"{args.idle_seconds:g} s (lower is better)"
        )
        lines.append("")
        lines.append("| system | CPU s | % of one core |")
        lines.append("|---|---:|---:|")
        for name, seconds in idle.items():
            lines.append(f"| {name} | {seconds:.3f} | {100 * seconds / args.idle_seconds:.2f}% |")
    lines.append("")
    lines.append("Settings:")
    for name in results:
        setting = SETTINGS[name].format(batch=args.pgqueuer_batch, jobs=f"{min(args.jobs, args.procrastinate_jobs):,}")
        api = next((s.enqueue_api for s in systems if s.name == name), "")
        lines.append(f"- {name}: {setting}; enqueued with {api}")
    errors = [f"{name}: {e}" for name, r in results.items() for e in r.errors]
    for note in notes + errors:
        lines.append(f"- {note}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), help="server to use (a database on it)"
    )
    parser.add_argument("--jobs", "-n", type=int, default=50_000, help="jobs per drain run (default 50000)")
    parser.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[50, 200, 500],
        help="comma-separated worker concurrencies for the drain (default 50,200,500)",
    )
    parser.add_argument("--drain-timeout", type=float, default=60.0, help="seconds before a drain run gives up")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s for the pickup latency (default 100)")
    parser.add_argument("--latency-seconds", type=float, default=8.0, help="timed seconds of latency inserts")
    parser.add_argument("--latency-concurrency", type=int, default=50, help="worker concurrency for latency and idle")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle CPU window (0 to skip)")
    parser.add_argument(
        "--no-idle-peers",
        dest="idle_peers",
        action="store_false",
        help="measure idle CPU of awa_bridge only (default: every system, all at once)",
    )
    parser.add_argument(
        "--systems",
        type=lambda s: s.split(","),
        default=list(SYSTEMS),
        help=f"comma-separated subset of {','.join(SYSTEMS)}",
    )
    parser.add_argument(
        "--procrastinate-jobs",
        type=int,
        default=2_000,
        help="jobs per procrastinate drain run (default 2000: it runs ~20x slower, so N would take minutes)",
    )
    parser.add_argument(
        "--bridge-config",
        metavar="JSON",
        help="WorkerConfig overrides for awa_bridge's worker, e.g. '{\"claim_batch\": 200}' (default: its defaults)",
    )
    parser.add_argument(
        "--pgqueuer-batch",
        type=int,
        default=PGQUEUER_BATCH,
        help=f"pgqueuer's batch_size, capped at concurrency / 2 (default {PGQUEUER_BATCH})",
    )
    parser.add_argument("--profile", metavar="DIR", help="run awa_bridge's workers under cProfile, stats into DIR")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-url", help=argparse.SUPPRESS)
    parser.add_argument("--child-concurrency", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in args.systems:
        if name not in SYSTEMS:
            parser.error(f"--systems: unknown system {name!r} (choose from {', '.join(SYSTEMS)})")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    if any(c < 1 for c in args.concurrency):
        parser.error("--concurrency values must be >= 1")
    if args.rate <= 0 or args.latency_seconds <= 0:
        parser.error("--rate and --latency-seconds must be positive")
    return args


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


LOAD_AT_START = _loadavg()


def _bridge_config() -> dict[str, Any]:
    """The ``--bridge-config`` WorkerConfig overrides, as the children get them."""
    config: dict[str, Any] = json.loads(os.environ.get("BENCH_WORKER_BRIDGE_CONFIG") or "{}")
    return config


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        config = _bridge_config()
        profile_dir = os.environ.get("BENCH_WORKER_PROFILE")  # set by --profile
        if profile_dir and args.child == "awa_bridge":
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
            try:
                bp.run_on_its_loop(args.child, child_main(args.child, args.child_url, args.child_concurrency), config)
            finally:
                profiler.disable()
                profiler.dump_stats(os.path.join(profile_dir, f"awa_bridge_{os.getpid()}.prof"))
            return
        bp.run_on_its_loop(args.child, child_main(args.child, args.child_url, args.child_concurrency), config)
        return
    os.environ["BENCH_WORKER_PGQUEUER_BATCH"] = str(args.pgqueuer_batch)
    if args.bridge_config:
        from awa_bridge.worker.config import WorkerConfig

        WorkerConfig(**json.loads(args.bridge_config))  # bad settings fail here, not in every child
        os.environ["BENCH_WORKER_BRIDGE_CONFIG"] = args.bridge_config
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        os.environ["BENCH_WORKER_PROFILE"] = os.path.abspath(args.profile)
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    url, server, where = bp.server(args.database_url)
    began = time.perf_counter()
    results, notes, systems = asyncio.run(run(args, url))
    print(report(args, where, results, notes, systems))
    print(f"\n(total {time.perf_counter() - began:.0f} s)", file=sys.stderr)
    del server  # the embedded server stops with the process


if __name__ == "__main__":
    bp.run_main(main)
