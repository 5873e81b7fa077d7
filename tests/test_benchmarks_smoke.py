"""The soak and scale benchmarks run as documented, with tiny parameters, so they cannot rot.

No figure is asserted (timings belong to the benchmarks, never to tests): a
run must finish, print its tables and verdicts, find no duplicated claim, and
leave no database or worker process behind, also when interrupted. The
verdict logic itself is checked on made-up periods.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_enqueue  # noqa: E402
import bench_procs  # noqa: E402
import bench_scale  # noqa: E402
import bench_soak  # noqa: E402
import bench_worker  # noqa: E402
import count_enqueue_instructions  # noqa: E402
import count_insert_server_instructions  # noqa: E402
import profile_single_enqueue  # noqa: E402

from .conftest import count_rows  # noqa: E402


def leftover_databases(server_url: str, pid: int, prefix: str = "awa_benchw") -> list[str]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{prefix}_{pid}_%",))
        return [r[0] for r in rows]


def produced(url: str) -> bool:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT EXISTS (SELECT 1 FROM awa.jobs)").fetchone()
            return bool(row and row[0])
    except psycopg.Error:  # not migrated yet
        return False


def run_script(server_url: str, script: str, *args: str, timeout: float = 240) -> tuple[str, str, int]:
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / script), "--database-url", server_url, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    assert leftover_databases(server_url, proc.pid) == []
    return out, err, proc.pid


def peers_installed() -> list[str]:
    found = []
    for module, name in (("pgqueuer", "pgqueuer"), ("procrastinate", "procrastinate")):
        try:
            __import__(module)
        except ImportError:
            continue
        found.append(name)
    return found


@pytest.mark.slow
def test_soak_runs_with_peers_and_prints_a_comparison(server_url: str) -> None:
    systems = ["awa_bridge", *peers_installed()]
    out, _, _ = run_script(
        server_url,
        "bench_soak.py",
        "--minutes",
        "0.1",
        "--rate",
        "100",
        "--report-seconds",
        "2",
        "--retention",
        "5",
        "--systems",
        ",".join(systems),
    )
    for name in systems:
        assert f"## {name}: 100 jobs/s offered for 0.1 min" in out
    assert out.count("Verdict: **") == len(systems)
    assert "produced/s | handled/s | p50 ms | p95 ms | p99 ms | live rows | finished rows" in out
    if len(systems) > 1:
        assert "## Comparison (first vs last window)" in out
    assert "Error:" not in out, out


@pytest.mark.slow
def test_pressure_runs_every_phase_and_loses_no_job(server_url: str) -> None:
    """R31 at a few seconds a phase: each pressure is applied (its held transaction shows in the
    oldest-transaction column), every job produced is handled, the queue drains, the worker stops."""
    out, err, _ = run_script(
        server_url,
        "bench_pressure.py",
        "--rate",
        "100",
        "--phase-seconds",
        "3",
        "--report-seconds",
        "1.5",
        "--drain-seconds",
        "60",
        "--retention",
        "5",
    )
    rows = {line.split("|")[1].strip(): line.split("|") for line in out.splitlines() if line.startswith("| ")}
    for phase in ("baseline", "idle-in-tx", "active-readers", "high-load", "recovery"):
        assert phase in rows, out
    oldest = {phase: float(rows[phase][8].replace(",", "")) for phase in ("baseline", "idle-in-tx", "active-readers")}
    assert oldest["idle-in-tx"] >= 1 and oldest["active-readers"] >= 1, out
    assert "- no job lost: yes" in out and "- drained after the pressure: yes" in out, out
    assert "- worker stopped cleanly: yes" in out, out
    assert float(rows["high-load"][2].replace(",", "")) > 120, out  # 1.5x the rate offered
    assert "active-readers |" in err


@pytest.mark.slow
def test_soak_find_max_ramps_then_soaks(server_url: str) -> None:
    out, err, _ = run_script(
        server_url,
        "bench_soak.py",
        "--find-max",
        "--start-rate",
        "50",
        "--max-rate",
        "100",
        "--step-seconds",
        "1",
        "--step-settle",
        "0.5",
        "--minutes",
        "0.05",
        "--report-seconds",
        "1",
    )
    assert "finding the highest sustained rate (each step 0.5 s to settle, then 1 s measured)" in err
    assert "Highest sustained rate found:" in out or "no rate from 50/s up was sustained" in out


@pytest.mark.slow
def test_scale_runs_every_section_without_duplicate_claims(server_url: str) -> None:
    out, err, _ = run_script(
        server_url,
        "bench_scale.py",
        "--retained",
        "3000",
        "--jobs",
        "300",
        "--rounds",
        "1",
        "--backlog",
        "2000",
        "--small",
        "300",
        "--processes",
        "1,2",
        "--scale-jobs",
        "600",
        "--concurrency",
        "20",
        "--cleanup-rows",
        "2000",
        "--cleanup-timeout",
        "3",
    )
    assert "FAILED" not in out, out + err
    assert "## Drain with 3,000 retained finished jobs vs an empty table" in out
    assert "Retained / empty: **" in out
    assert "| drain / limit, median of rounds |" in out
    assert "Big / small: **" in out
    assert "the SQL-only loop's own big / small: " in out
    # The big backlog's row (five columns; the cleanup table's 2,000 row has eight) ends with its SQL-only limit.
    assert re.search(r"^\| 2,000 \| [\d,]+ \| [\d,]+ \| [\d.]+ \| [\d,]+ \|$", out, re.M), out
    assert "Rate per tenth of the big drain" in out
    assert "| 2 |" in out
    assert "Claims never duplicated, every job completed once: **yes**" in out
    assert "## Retention cleanup: 2,000 finished jobs past their retention" in out


@pytest.mark.slow
def test_scale_drains_a_never_analyzed_backlog(server_url: str) -> None:
    """``--no-analyze``: the drains start on jobs no ANALYZE has seen, as after a bulk load."""
    out, err, _ = run_script(
        server_url, "bench_scale.py", "--only", "backlog", "--no-analyze", "--backlog", "2000", "--small", "300"
    )
    assert "FAILED" not in out, out + err
    assert "Queued jobs never ANALYZEd (--no-analyze)." in out
    assert "Big / small: **" in out


@pytest.mark.slow
def test_storage_compares_one_table_with_the_split_layout(server_url: str) -> None:
    """Both layouts drain every job and keep a sustained rate; the split's retention drops partitions,
    and the one table's deletes its finished jobs: neither keeps much more than its retention's worth."""
    out, err, _ = run_script(
        server_url,
        "bench_storage.py",
        "--drain-jobs",
        "3000",
        "--rounds",
        "2",
        "--rate",
        "200",
        "--minutes",
        "0.15",
        "--report-seconds",
        "3",
        "--retention",
        "2",
        "--partition-seconds",
        "1",
        "--cleanup-interval",
        "0.5",
    )
    assert "## Drain: 3,000 queued jobs, median of 2 interleaved rounds" in out, out + err
    assert "Split / one table: **" in out
    for layout in ("one table", "split"):
        assert f"## {layout}: 200 jobs/s for 0.15 min, retention 2 s" in out
    assert out.count("Verdict: **") == 2
    dropped = re.search(r"Partitions dropped by retention: (\d+)\.", out)
    assert dropped and int(dropped.group(1)) >= 3, out
    # The last period of each layout: at 200 jobs/s with 2 s of retention (the split's up to 3 s, a
    # partition's width more, a retention pass's interval more), nowhere near the 1,800 produced.
    finished = [int(m.replace(",", "")) for m in re.findall(r"^\| 0:09 \|(?: [^|]+ \|){6} ([\d,]+) \|", out, re.M)]
    assert len(finished) == 2 and max(finished) < 1200, out
    assert "## Sustained, side by side" in out


def test_soak_refuses_a_negative_step_settle() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_soak.py"), "--find-max", "--step-settle", "-1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--step-settle must be >= 0" in done.stderr, done


@pytest.mark.slow
def test_interrupted_soak_stops_its_workers_and_drops_its_database(server_url: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "bench_soak.py"), "--database-url", server_url, "--minutes", "5"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint(signal.SIG_DFL),  # a terminal's Ctrl-C
    )
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        children: list[Any] = []
        while time.monotonic() < deadline:
            children = [c for c in parent.children(recursive=True) if "bench_procs.py" in " ".join(c.cmdline())]
            if children and leftover_databases(server_url, proc.pid):
                break
            time.sleep(0.1)
        assert children, "the soak never started its worker"
        # Interrupt mid-run: once the producer's jobs are in the soak's database.
        soak_db = bench_worker.with_dbname(server_url, f"awa_benchw_{proc.pid}_awa_bridge")
        while time.monotonic() < deadline and not produced(soak_db):
            time.sleep(0.1)
        assert produced(soak_db), "the soak's producer never inserted a job"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: workers stopped, databases dropped" in err
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert leftover_databases(server_url, proc.pid) == []


def sigint(disposition: signal.Handlers) -> Any:
    """A ``preexec_fn`` giving the child SIGINT's ``disposition``: ignored is a shell's background
    job (CI's own run, often), the default a terminal's foreground; the two stop differently."""
    return lambda: signal.signal(signal.SIGINT, disposition)


SIGINT_DISPOSITIONS = pytest.mark.parametrize(
    "disposition", [signal.SIG_IGN, signal.SIG_DFL], ids=["sigint-ignored", "sigint-default"]
)


@pytest.mark.slow
@SIGINT_DISPOSITIONS
@pytest.mark.parametrize(
    ("script", "args", "prefix", "database"),
    [
        ("bench_worker.py", ("--systems", "awa_bridge", "--jobs", "20000", "--concurrency", "5"), "awa_benchw", ""),
        ("bench_enqueue.py", ("--single", "100000", "--skip-bulk", "--no-sync-off"), "awa_bench", "awa_bridge"),
    ],
)
def test_sigterm_stops_a_benchmark_and_drops_its_databases(
    server_url: str, script: str, args: tuple[str, ...], prefix: str, database: str, disposition: signal.Handlers
) -> None:
    """A plain ``kill`` mid-run: every database dropped, every worker process stopped, one line, status 143."""
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / script), "--database-url", server_url, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint(disposition),
    )
    try:
        deadline = time.monotonic() + 60
        children: list[Any] = []
        busy = False
        while time.monotonic() < deadline and not busy:
            time.sleep(0.1)
            if script == "bench_worker.py":  # mid-drain: a worker child runs on a database of the run
                children = [c for c in psutil.Process(proc.pid).children() if "--child" in c.cmdline()]
                busy = bool(children and leftover_databases(server_url, proc.pid, prefix))
            else:  # mid-enqueue: jobs in awa_bridge's database
                busy = produced(bench_worker.with_dbname(server_url, f"{prefix}_{proc.pid}_{database}"))
        assert busy, f"{script} never got going"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and err.splitlines()[-1].startswith("interrupted: "), err[-2000:]
    assert "dropped" in err.splitlines()[-1]
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert leftover_databases(server_url, proc.pid, prefix) == []


STOP_PROBE = """
import asyncio, os, signal, sys
sys.path.insert(0, sys.argv[1])
import bench_procs

async def amain():
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs as kill returns, mid-statement
        print("the code in progress went on", flush=True)
        await asyncio.sleep(30)
        print("not stopped", flush=True)
    finally:
        await asyncio.sleep(0)
        print("clean-up awaited", flush=True)

class ClosingLoop(asyncio.SelectorEventLoop):
    async def shutdown_default_executor(self, *args):
        self.call_soon(os.kill, os.getpid(), signal.SIGTERM)  # in the loop's very last round

def main():
    if sys.argv[2] == "loop":
        asyncio.run(amain())
    elif sys.argv[2] == "lost":
        with asyncio.Runner(loop_factory=ClosingLoop) as runner:
            runner.run(asyncio.sleep(0))
        print("the stop was lost with the loop", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        print("not stopped", flush=True)
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        print("not stopped", flush=True)

bench_procs.run_main(main, "interrupted: probe")
"""


@SIGINT_DISPOSITIONS
def test_sigterm_stops_between_two_callbacks_never_inside_one(disposition: signal.Handlers) -> None:
    """Under an event loop SIGTERM's stop waits for the code in progress to reach an ``await``:
    raised where the signal lands (inside asyncpg's protocol callback, or between ``CREATE
    DATABASE`` and recording it), it crashed a benchmark or left a database behind. The
    clean-up's awaits still run; without a loop the stop is immediate. A stop handed to a loop in
    its last round is lost with the loop: the next SIGTERM stops the script."""
    for where, expected in [
        ("loop", ["the code in progress went on", "clean-up awaited"]),
        ("plain", []),
        ("lost", ["the stop was lost with the loop"]),
    ]:
        done = subprocess.run(
            [sys.executable, "-c", STOP_PROBE, str(BENCH), where],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=sigint(disposition),
        )
        assert done.returncode == 143, done.stderr[-2000:]
        assert done.stdout.splitlines() == expected, (where, done.stdout, done.stderr[-2000:])
        assert done.stderr.splitlines() == ["interrupted: probe"], (where, done.stderr[-2000:])


UNREACHABLE = "postgresql://postgres:secret@127.0.0.1:1/postgres"


def run_with_env_url(url: str, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` with ``DATABASE_URL`` set to ``url`` (every script takes it, with or without ``--database-url``)."""
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DATABASE_URL": url},
    )


@pytest.mark.parametrize("url", [UNREACHABLE, "notaurl"])
@pytest.mark.parametrize(
    "script",
    [
        "bench_admin_stats.py",
        "bench_django_admin.py",
        "bench_enqueue.py",
        "bench_executor.py",
        "bench_pressure.py",
        "bench_scale.py",
        "bench_soak.py",
        "bench_storage.py",
        "bench_worker.py",
        "count_drain_instructions.py",
        "count_enqueue_instructions.py",
        "profile_single_enqueue.py",
    ],
)
@pytest.mark.own_server
def test_a_server_that_cannot_be_reached_is_one_line_and_status_2(script: str, url: str) -> None:
    done = run_with_env_url(url, script)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    shown = url.replace("secret", "***")
    assert lines[0].startswith(f"{script}: cannot connect to {shown}: "), lines[0]
    assert "secret" not in done.stderr


@pytest.mark.parametrize(
    ("script", "args", "option"),
    [
        ("bench_admin_stats.py", ("--rows", "-1"), "--rows"),
        ("bench_admin_stats.py", ("--runs", "0"), "--runs"),
        ("bench_django_admin.py", ("--jobs", "-1"), "--jobs"),
        ("bench_django_admin.py", ("--runs", "0"), "--runs"),
        ("profile_single_enqueue.py", ("-n", "0"), "-n"),
        ("profile_single_enqueue.py", ("-n", "-1"), "-n"),
        ("count_enqueue_instructions.py", ("--small", "5", "--large", "5"), "--large"),
        ("count_enqueue_instructions.py", ("--small", "0"), "--small"),
        ("count_insert_server_instructions.py", ("--small", "5", "--large", "5"), "--large"),
        ("count_insert_server_instructions.py", ("--small", "0"), "--small"),
        ("count_drain_instructions.py", ("--small", "-1"), "--small"),
        ("bench_executor.py", ("--jobs", "-1"), "--jobs"),
        ("bench_executor.py", ("--rounds", "0"), "--rounds"),
        ("bench_celery_limits.py", ("--tasks", "-1"), "--tasks"),
        ("bench_storage.py", ("--drain-jobs", "-1"), "--drain-jobs"),
        ("bench_storage.py", ("--rate", "0"), "--rate"),
    ],
)
@pytest.mark.own_server
def test_a_size_out_of_range_is_refused_before_anything_runs(script: str, args: tuple[str, ...], option: str) -> None:
    done = run_with_env_url(UNREACHABLE, script, *args)  # no server is needed to refuse them
    assert done.returncode == 2 and f"error: {option} must be" in done.stderr, done.stderr[-3000:]


@pytest.mark.slow
async def test_a_worker_child_reports_a_long_period_in_one_stats_line(db_url: str) -> None:
    """20,000 latencies (well over asyncio's 64 KiB default line) come back in one STATS answer."""
    import asyncpg

    import awa_bridge

    conn = await asyncpg.connect(db_url)
    try:
        now = time.time()
        jobs = [{"i": i, "t": now} for i in range(20_000)]
        await awa_bridge.insert_many(conn, jobs, kind=bench_procs.KIND, queue=bench_procs.QUEUE)
    finally:
        await conn.close()
    worker = bench_procs.Worker("awa_bridge", db_url, 50, ledger=True)
    try:
        await worker.spawn()
        await worker.start()
        handled: list[float] = []
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 20_000 and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            got = await worker.stats()
            seen += got["handled"]
            handled.extend(got["latencies"])
        assert seen == 20_000
        assert len(handled) == 20_000 and all(x > 0 for x in handled)
        assert await worker.stop() == 20_000
        assert sorted(worker.ids()) == sorted(set(worker.ids())) and len(worker.ids()) == 20_000
    finally:
        await worker.kill()
        worker.cleanup()


# -- the verdict, on made-up periods ----------------------------------------------------------


def period(k: int, rate: float, p95: float, size_mb: float, live: int = 0) -> bench_soak.Interval:
    return bench_soak.Interval(
        end=60.0 * k,
        seconds=60.0,
        produced=int(rate * 60),
        handled=int(rate * 60),
        p50=p95 / 2,
        p95=p95,
        p99=p95 * 2,
        live=live,
        finished=1000,
        heap=int(size_mb * 2**20 * 0.7),
        indexes=int(size_mb * 2**20 * 0.3),
        dead=0,
        autovacuums=0,
        autoanalyzes=0,
        vacuuming=0,
    )


def test_a_flat_soak_passes() -> None:
    periods = [period(k, 2000, 3.0, 100.0) for k in range(1, 31)]
    verdict = bench_soak.judge(periods, 2000, 300, retention=120)
    assert verdict.passed and verdict.size_judged, verdict.lines
    assert verdict.word == "PASS"


def test_a_growing_table_fails_the_soak() -> None:
    periods = [period(k, 2000, 3.0, 100.0 + 10 * k) for k in range(1, 31)]
    verdict = bench_soak.judge(periods, 2000, 300, retention=120)
    assert not verdict.passed
    assert any("FAIL: growing" in line for line in verdict.lines)


def test_a_slowing_soak_fails_on_throughput_and_p95() -> None:
    periods = [period(k, 2000 if k <= 20 else 1500, 3.0 if k <= 20 else 5.0, 100.0) for k in range(1, 31)]
    verdict = bench_soak.judge(periods, 2000, 300, retention=120)
    assert not verdict.passed
    assert any(line.startswith("throughput:") and "FAIL" in line for line in verdict.lines)
    assert any(line.startswith("pickup p95") and "FAIL" in line for line in verdict.lines)


def test_a_stall_in_the_first_window_fails_the_soak() -> None:
    """Seconds of p95 in the first period, milliseconds after: the window comparison alone passed it."""
    periods = [period(k, 2000, 5000.0 if k == 1 else 12.0, 100.0) for k in range(1, 31)]
    verdict = bench_soak.judge(periods, 2000, 300, retention=120)
    assert not verdict.passed
    assert any(line.startswith("stall: pickup p95 5,000.0 ms in the period ending 1:00") for line in verdict.lines)
    assert not any("FAIL" in line for line in verdict.lines if not line.startswith("stall")), verdict.lines
    noisy = [period(k, 2000, 134.6 if k == 5 else 13.0, 100.0) for k in range(1, 31)]  # an autovacuum's minute
    assert not any(line.startswith("stall") for line in bench_soak.judge(noisy, 2000, 300, retention=120).lines)


def trend_line(periods: list[bench_soak.Interval]) -> str:
    lines = bench_soak.judge(periods, 2000, 300, retention=120).lines
    return next(line for line in lines if line.startswith("pickup p95 trend"))


def test_the_p95_trend_tells_noise_from_growth() -> None:
    """The trend line (not judged) reads ~0 for alternating noise and the slope for a steady climb."""
    noisy = trend_line([period(k, 2000, 6.5 if k % 2 else 9.5, 100.0) for k in range(1, 31)])
    assert "from 8:00 to the end" in noisy  # the first settled period: retention + a minute after the first window
    assert " +0.00 ms per 10 min" in noisy or " -0.00 ms per 10 min" in noisy, noisy
    climbing = trend_line([period(k, 2000, 3.0 + 0.1 * k, 100.0) for k in range(1, 31)])
    assert " +1.00 ms per 10 min" in climbing, climbing


def test_a_short_soak_does_not_judge_size() -> None:
    periods = [period(k, 200, 3.0, 1.0 + k) for k in range(1, 4)]
    verdict = bench_soak.judge(periods, 200, 300, retention=120)
    assert verdict.passed and not verdict.size_judged
    assert verdict.word == "PASS (size not judged)"


def test_segment_rates_cover_the_drain_in_tenths() -> None:
    run = bench_scale.DrainRun(n=1000, seconds=10.0, rate=100.0)
    run.progress = [(float(t), 1000 - 100 * t) for t in range(11)]
    assert bench_scale.segment_rates(run) == [100.0] * 10


def test_warm_rate_leaves_the_start_up_out() -> None:
    run = bench_scale.DrainRun(n=1000, seconds=2.0, rate=500.0)
    run.progress = [(0.0, 1000), (0.5, 1000), (1.0, 900), (1.5, 450), (2.0, 0)]
    assert run.warm_rate == pytest.approx(900.0)
    assert bench_scale.DrainRun(n=10, seconds=1.0, rate=10.0, progress=[(1.0, 0)]).warm_rate == 10.0


def test_enqueue_rounds_are_shuffled_and_no_case_runs_twice_in_a_row() -> None:
    """The single-enqueue rounds: each a permutation of the cases, the same in every run, and
    never starting with the case that ended the round before (a second chunk in a row would run warm)."""
    import itertools
    import random

    cases = [f"case{i}" for i in range(5)]

    def rounds() -> list[list[str]]:
        shuffler, order, made = random.Random(bench_enqueue.SHUFFLE_SEED), cases, []
        for _ in range(200):
            order = bench_enqueue.next_order(order, shuffler)
            made.append(order)
        return made

    made = rounds()
    assert made == rounds()
    assert all(sorted(order) == cases for order in made)
    assert all(after[0] != before[-1] for before, after in itertools.pairwise(made))
    assert len({order[0] for order in made}) == len(cases), "every case gets to go first"
    assert bench_enqueue.next_order(["only"], random.Random(1)) == ["only"]


def test_profile_steps_times_each_step_of_insert_job_between_round_trips(server_url: str) -> None:
    """``profile_single_enqueue.py --steps`` prints one row per step of ``insert_job``'s client path,
    each timed cold (just after a round trip) and, but for the round trip, warm (a loop of its own)."""
    out, _, _ = run_script(server_url, "profile_single_enqueue.py", "--steps", "-n", "60")
    assert "insert_job's own steps between round trips (60 rounds)" in out
    rows = {}
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 3 and cells[0] in profile_single_enqueue.STEP_NAMES:
            rows[cells[0]] = cells[1:]
    assert list(rows) == list(profile_single_enqueue.STEP_NAMES), out
    for name, (cold, warm) in rows.items():
        assert float(cold.replace(",", "")) > 0, (name, cold)
        if name == "the round trip of insert_job's statement":
            assert warm == "-"
        else:
            assert float(warm.replace(",", "")) > 0, (name, warm)


def test_enqueue_benchmark_measures_client_insert_in_autocommit(server_url: str) -> None:
    """``bench_enqueue.py --autocommit`` runs the ``Client.insert`` case beside its bare-INSERT baseline
    and the bare call of the function it enqueues through, and prints its ratio to each."""
    out, _, pid = run_script(
        server_url,
        "bench_enqueue.py",
        *("--single", "20", "--single-warmup", "5", "--chunk", "10", "--skip-bulk", "--no-sync-off"),
        *("--autocommit", "--only", "Client.insert"),
    )
    assert "x insert alone (--autocommit)" in out
    assert "| awa_bridge | awa_bridge Client.insert | asyncpg |" in out
    assert "| baseline | bare INSERT | asyncpg |" in out
    for driver in ("asyncpg", "psycopg", "psycopg-async"):  # the statement insert_job sends, sent bare
        assert f"| statement | insert_job's statement, sent bare | {driver} |" in out
    assert "Client.insert (asyncpg, durable):" in out and "of its own statement sent bare (its client path)" in out
    with psycopg.connect(server_url, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"awa_bench_{pid}_%",))
        assert [r[0] for r in rows] == []


def test_enqueue_benchmark_compares_each_driver_with_pgqueuer_on_the_same_driver(server_url: str) -> None:
    """pgqueuer runs on asyncpg, psycopg and psycopg async (a dev dependency, so this runs in CI):
    ``bench_enqueue.py`` measures its single enqueue on each, and judges ``insert_job`` against
    pgqueuer on the same driver as well as against its asyncpg figure."""
    out, _, _ = run_script(
        server_url,
        "bench_enqueue.py",
        *("--single", "20", "--single-warmup", "5", "--chunk", "10", "--skip-bulk", "--no-sync-off"),
    )
    for label, driver in (
        ("Queries.enqueue", "asyncpg"),
        ("SyncQueries.enqueue", "psycopg"),
        ("Queries.enqueue", "psycopg-async"),
    ):
        assert f"| pgqueuer | pgqueuer {label} | {driver} |" in out
    assert "- awa_bridge insert_job (psycopg-async, durable):" in out
    assert "vs pgqueuer single on psycopg-async" in out and "vs pgqueuer single on asyncpg" in out
    # The ORM doors, each beside the same bare INSERT sent through its framework, with the ratio to it.
    for label, driver in (("insert_job(session)", "sqlalchemy"), ("insert_job(connection)", "django")):
        assert f"| baseline | bare INSERT | {driver} |" in out
        start = f"| awa_bridge | awa_bridge {label} | {driver} |"
        row = next(line for line in out.splitlines() if line.startswith(start))
        assert re.search(r"\| \d\.\d\dx \|", row), row


def server_binaries_to_count() -> bool:
    """valgrind, PostgreSQL's server binaries, and (as root) a ``postgres`` user to run them as."""
    if shutil.which("valgrind") is None or shutil.which("pg_config") is None:
        return False
    bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
    if not (Path(bindir) / "initdb").exists() or not (Path(bindir) / "postgres").exists():
        return False
    if os.geteuid() != 0:
        return True
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return shutil.which("runuser") is not None


@pytest.mark.own_server  # a throwaway cluster of its own (initdb)
@pytest.mark.skipif(not server_binaries_to_count(), reason="needs valgrind and PostgreSQL's server binaries")
def test_server_instruction_count_runs_every_statement_it_names() -> None:
    """``count_insert_server_instructions.py`` executes each case without error, and counts.

    The script raises when a statement fails in the single-user session (a
    statement of ``insert_job`` that stopped parsing, a case that no longer
    matches the schema): ``--check`` runs every case both ways without
    valgrind, so a run that names each case ran every statement compared,
    ``insert_job``'s own among them. Counting is then tried the documented
    way on ``insert_job``'s case and its base (each case costs four runs
    under valgrind, about two seconds each).
    """

    def script(*args: str) -> str:
        command = [sys.executable, str(BENCH / "count_insert_server_instructions.py"), *args]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    checked = script("--check")
    assert checked.splitlines() == [f"runs: {case}" for case in count_insert_server_instructions.CASES], checked
    out = script("--only", "insert_job's insert_plain_job", "--small", "2", "--large", "4")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row.split(" | ")[0][2:] for row in rows[1:]] == [
        next(iter(count_insert_server_instructions.CASES)),
        next(case for case in count_insert_server_instructions.CASES if case.startswith("insert_job's")),
    ], out
    assert all(int(row.split(" | ")[1].replace(",", "")) > 0 for row in rows[1:]), out


@pytest.mark.own_server
@pytest.mark.skipif(not server_binaries_to_count(), reason="needs valgrind and PostgreSQL's server binaries")
@pytest.mark.parametrize("as_text", [False, True], ids=["prepared", "as-text"])
@pytest.mark.parametrize("counted", [False, True], ids=["check", "counted"])
def test_server_instruction_count_stops_at_a_statement_that_fails(
    monkeypatch: pytest.MonkeyPatch, as_text: bool, counted: bool
) -> None:
    """A statement PostgreSQL refuses stops the count with its ERROR, with valgrind or without (until
    2026-12-07 the script looked for it in the standard output, where ``postgres --single`` does not
    write it, and counted the failing statement as if it had run)."""
    script = count_insert_server_instructions
    broken = "a column that is not there"
    monkeypatch.setitem(script.CASES, broken, ("INSERT INTO awa.jobs (kind, nosuch) VALUES ($1, $2)", "'k', %d"))
    bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as root:  # as the script's: a directory the cluster's user can reach
        cluster = script.Cluster(root, bindir, "postgres" if os.geteuid() == 0 else None)
        cluster.create()
        with pytest.raises(RuntimeError, match=r'failed in the single-user session: .*ERROR:  column "nosuch"'):
            cluster.instructions(broken, 2, as_text, counted=counted)


@pytest.mark.own_server
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_instruction_counts_of_one_program_repeat_exactly() -> None:
    """``callgrind`` runs a Python child with one fixed hash seed, so the same program counts the
    same twice (with a random seed two runs differed by up to a million instructions)."""
    program = [sys.executable, "-c", "import json; json.dumps({str(i): i for i in range(50)})"]
    first, _ = count_enqueue_instructions.callgrind(program, "twice")
    second, _ = count_enqueue_instructions.callgrind(program, "twice")
    assert first == second


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_client_instruction_count_takes_insert_job_apart(server_url: str) -> None:
    """``count_enqueue_instructions.py`` prints its part-by-part table, and every part it names runs.

    Each part runs as the script's child does, without valgrind (a part that stopped matching
    ``prepare_job`` or ``PreparedJob`` would raise there); one part is then counted the documented
    way, under valgrind, and its row printed with a count.
    """
    script = str(BENCH / "count_enqueue_instructions.py")
    for part in count_enqueue_instructions.PARTS:
        done = subprocess.run(
            [sys.executable, script, "--child", part, "--calls", "3", "--database-url", server_url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (part, done.stderr[-3000:])
    # 1,000 calls apart: a difference far above what two runs of the interpreter differ by.
    only = ["--only", "the args", "--small", "10", "--large", "1010"]
    out, _, _ = run_script(server_url, "count_enqueue_instructions.py", *only)
    row = next(line for line in out.splitlines() if line.startswith("| the args object"))
    assert int(row.split("|")[2].replace(",", "")) > 0, out


def test_client_instruction_count_cases_each_enqueue(db_url: str) -> None:
    """Every case ``count_enqueue_instructions.py`` counts (pgqueuer's aside: its schema is not here)
    runs as the script's child does, without valgrind, and writes its jobs: three each."""
    script = str(BENCH / "count_enqueue_instructions.py")
    cases = [case for case in count_enqueue_instructions.CASES if not case.startswith("pgqueuer")]
    assert {"insert_job, SQLAlchemy", "insert_job, Django"} <= set(cases)
    for case in cases:
        done = subprocess.run(
            [sys.executable, script, "--child", case, "--calls", "3", "--database-url", db_url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (case, done.stderr[-3000:])
    assert count_rows(db_url) == 3 * len(cases)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_drain_instruction_count_counts_and_every_case_drains(server_url: str) -> None:
    """``count_drain_instructions.py`` prints a count, and each worker it counts drains to its last job.

    The whole script runs on its lightest case (a run under valgrind costs
    about half a minute of start-up); each worker case then runs as the
    script's child does, without valgrind, which only counts. A child that
    stops short of its jobs raises or hangs, so each must exit cleanly with
    nothing left in its queue.
    """
    args = ("--only", "SQL-only loop", "--small", "1", "--large", "3")
    out, _, pid = run_script(server_url, "count_drain_instructions.py", *args, timeout=600)
    assert [line for line in out.splitlines() if line.startswith("| SQL-only loop |")], out
    with psycopg.connect(server_url, autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname = %s", (f"awa_countdrain_{pid}",))
        assert left.fetchall() == []
    name = f"awa_smoke_drain_{os.getpid()}"
    url = bench_worker.with_dbname(server_url, name)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        systems = [bench_worker.bridge_system()]
        if "pgqueuer" in peers_installed():
            systems.append(bench_worker.pgqueuer_system())
        for system in systems:
            asyncio.run(system.install(url))
            asyncio.run(system.enqueue_bulk(url, 25))
            child = [sys.executable, str(BENCH / "count_drain_instructions.py"), "--database-url", url]
            done = subprocess.run(
                [*child, "--child", system.name, "--jobs", "25"], capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr[-3000:]
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(system.remaining_sql).fetchone()
                assert row is not None and row[0] == 0, system.name
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
