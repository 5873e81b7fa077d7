"""PostgreSQL's instructions per single enqueue, counted by valgrind: the server's share, without noise.

``count_enqueue_instructions.py`` counts the client; this counts the server
executing the same statements, so that what the SQL itself costs (a bare
INSERT, ``awa.insert_job_compat`` called in FROM or in a select list, as
``insert_job`` sent it until 2026-12-04, and the INSERT it sends now) can be compared on a machine whose wall
clock moves with everyone else's load. It makes a throwaway cluster with
``initdb``, migrates it, then runs ``postgres --single`` under ``valgrind
--tool=callgrind`` twice per case (``--small`` and ``--large`` executions,
each its own transaction): the difference of the totals over the difference
of the counts is one execution, start-up and shutdown excluded. Each case is
counted twice: as one prepared statement executed again and again (what
asyncpg's statement cache and psycopg's automatic prepare make of it), and
sent as text with its values in it, parsed, analysed and planned anew each
time (what psycopg's client-side binding, Django's default, sends). No
network and no client are involved, so the figures are the statement, its
triggers and its commit (``synchronous_commit`` off: the
flush is a wait, not instructions).

    python benchmarks/count_insert_server_instructions.py

``--only`` counts the cases whose names contain one of its substrings (and
the first, the ratios' base); ``--check`` runs every statement once each way
without valgrind, counting nothing: a quick proof that each still runs.

Needs valgrind and the PostgreSQL server binaries (``--bindir``, default
``pg_config --bindir``). PostgreSQL refuses to run as root: as root, the
cluster runs as ``--os-user`` (default ``postgres``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile

import bench_procs as bp
from count_enqueue_instructions import callgrind, check_sizes

from awa_bridge.sql import QUERIES

ARGS_JSON = """'{"n": %d, "to": "a@example.com", "subject": "Hi"}'"""


# insert_plain_job as it was sent before 2026-12-03 evening: six parameters, the
# defaults of priority, max_attempts and metadata sent rather than left to the function.
_SIX_PARAMETERS_CALL = """awa.insert_job_compat(
    p_kind => CAST($1 AS text), p_queue => CAST($2 AS text), p_args => CAST($3 AS jsonb),
    p_priority => CAST($4 AS smallint), p_max_attempts => CAST($5 AS smallint),
    p_metadata => CAST($6 AS jsonb))"""
_THREE = "'send_email', 'bench', " + ARGS_JSON
_SIX = _THREE + ", 2, 25, '{}'"

CASES: dict[str, tuple[str, str]] = {
    # case -> (PREPARE body, EXECUTE arguments with %d for the call number)
    "bare INSERT (kind, queue, args) RETURNING id": (
        "INSERT INTO awa.jobs (kind, queue, args) VALUES ($1, $2, CAST($3 AS jsonb)) RETURNING id",
        _THREE,
    ),
    "bare INSERT (kind, queue, args) RETURNING id, run_at, created_at": (
        "INSERT INTO awa.jobs (kind, queue, args) VALUES ($1, $2, CAST($3 AS jsonb)) RETURNING id, run_at, created_at",
        _THREE,
    ),
    "bare INSERT of six columns (kind ... metadata) RETURNING id, run_at, created_at": (
        "INSERT INTO awa.jobs (kind, queue, args, priority, max_attempts, metadata) VALUES "
        "($1, $2, CAST($3 AS jsonb), CAST($4 AS smallint), CAST($5 AS smallint), CAST($6 AS jsonb)) "
        "RETURNING id, run_at, created_at",
        _SIX,
    ),
    "awa.insert_job_compat, six parameters, in FROM (insert_job before 2026-12-03)": (
        f"SELECT id, run_at, created_at FROM {_SIX_PARAMETERS_CALL}",
        _SIX,
    ),
    "awa.insert_job_compat, six parameters, in a select list (2026-12-03)": (
        f"SELECT (j).id, (j).run_at, (j).created_at FROM (SELECT {_SIX_PARAMETERS_CALL} AS j OFFSET 0) AS inserted",
        _SIX,
    ),
    "awa.insert_job_compat, three parameters, in a select list (2026-12-03 evening to 2026-12-04)": (
        "SELECT (j).id, (j).run_at, (j).created_at FROM (SELECT awa.insert_job_compat(p_kind => CAST($1 AS text),"
        " p_queue => CAST($2 AS text), p_args => CAST($3 AS jsonb)) AS j OFFSET 0) AS inserted",
        _THREE,
    ),
    "insert_plain_job returning run_at, NULLIF(created_at, run_at) (2026-12-04 to 2026-12-06)": (
        "INSERT INTO awa.jobs (kind, queue, args) VALUES (CAST($1 AS text), CAST($2 AS text), CAST($3 AS jsonb))"
        " RETURNING id, run_at, NULLIF(created_at, run_at) AS created_at",
        _THREE,
    ),
    "insert_plain_job returning the times as integers (2026-12-06, 09:00 to 13:00 UTC)": (
        "INSERT INTO awa.jobs (kind, queue, args) VALUES (CAST($1 AS text), CAST($2 AS text), CAST($3 AS jsonb))"
        " RETURNING id, CAST(EXTRACT(EPOCH FROM run_at) * 1000000 AS bigint) AS run_at_us,"
        " CASE WHEN created_at <> run_at THEN CAST(EXTRACT(EPOCH FROM created_at) * 1000000 AS bigint) END"
        " AS created_at_us",
        _THREE,
    ),
    "insert_job's insert_plain_job (an INSERT from 2026-12-04, returning id, created_at from 2026-12-06 13:00)": (
        QUERIES["insert_plain_job"].numeric,
        _THREE,
    ),
}


def _with_values(statement: str, arguments: str) -> str:
    """``statement`` with its ``$n`` replaced by the literals of ``arguments`` (what psycopg's
    client-side binding, Django's default, sends)."""
    values = re.findall(r"'(?:[^']|'')*'|[^,\s][^,]*", arguments)
    for number in range(len(values), 0, -1):  # $10 before $1
        statement = statement.replace(f"${number}", values[number - 1].strip())
    return statement


class Cluster:
    """A throwaway cluster in ``root``, run as ``user`` when this process is root."""

    def __init__(self, root: str, bindir: str, user: str | None) -> None:
        self.root, self.bindir, self.user = root, bindir, user
        self.data = os.path.join(root, "data")

    @property
    def run_as(self) -> list[str]:
        return ["runuser", "-u", self.user, "--"] if self.user else []

    def command(self, program: str, *args: str) -> list[str]:
        return [*self.run_as, os.path.join(self.bindir, program), *args]

    def create(self) -> None:
        if self.user:
            shutil.chown(self.root, self.user)
        subprocess.run(self.command("initdb", "-D", self.data, "-A", "trust", "-U", "postgres"), check=True,
                       capture_output=True)  # fmt: skip
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        options = f"-p {port} -k {self.root} -c listen_addresses=''"
        log = os.path.join(self.root, "log")
        subprocess.run(self.command("pg_ctl", "-D", self.data, "-l", log, "-o", options, "-w", "start"),
                       check=True, capture_output=True)  # fmt: skip
        try:
            import awa_bridge

            awa_bridge.migrate(f"postgresql://postgres@/postgres?host={self.root}&port={port}")
        finally:
            subprocess.run(self.command("pg_ctl", "-D", self.data, "-w", "stop"), check=True, capture_output=True)

    def instructions(self, case: str, calls: int, as_text: bool, counted: bool = True) -> int:
        """Instructions of one single-user session that executes ``case`` ``calls`` times: one prepared
        statement executed, or (``as_text``) the statement sent each time with its values in its text.
        Not ``counted``: the session runs without valgrind (a check that it runs) and 0 is returned."""
        body, arguments = CASES[case]
        statement = " ".join(body.split())
        if as_text:
            lines = [_with_values(statement, arguments % n) + ";" for n in range(calls)]
        else:
            lines = [f"PREPARE s AS {statement};"]
            lines += [f"EXECUTE s({arguments % n});" for n in range(calls)]
        script = os.path.join(self.root, "script.sql")
        with open(script, "w") as out:
            out.write("\n\n".join(lines) + "\n")  # -j: a blank line ends each statement
        # -r: the session's log (where an ERROR is written: its standard error) goes to a file of its own.
        log = os.path.join(self.root, "single.log")
        with contextlib.suppress(FileNotFoundError):
            os.remove(log)  # postgres appends
        single = [os.path.join(self.bindir, "postgres"), "--single", "-j", "-D", self.data, "-r", log,
                  "-c", "synchronous_commit=off", "postgres"]  # fmt: skip
        with open(script) as stdin:
            if counted:
                total, _ = callgrind(single, case, run_as=self.run_as, stdin=stdin)
            else:
                total = 0
                subprocess.run([*self.run_as, *single], stdin=stdin, capture_output=True, check=True)
        with open(log) as written:
            errors = [line for line in written if " ERROR: " in line]
        if errors:
            raise RuntimeError(f"{case!r} failed in the single-user session: {''.join(errors)[-800:]}")
        return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bindir", help="PostgreSQL's server binaries (default: pg_config --bindir)")
    parser.add_argument("--os-user", default="postgres", help="the user the cluster runs as when this is root")
    parser.add_argument("--small", type=int, default=500)
    parser.add_argument("--large", type=int, default=2500)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated substrings: count only the cases matching one (and the first, the base)",
    )
    parser.add_argument(
        "--check", action="store_true", help="run every case once each way without valgrind, counting nothing"
    )
    args = parser.parse_args(argv)
    check_sizes(parser, args)
    if not args.check and shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    bindir = args.bindir or subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                                           check=True).stdout.strip()  # fmt: skip
    user = args.os_user if os.geteuid() == 0 else None
    base = next(iter(CASES))  # the ratios' denominator, always counted
    cases = [
        case for case in CASES if case == base or not args.only or any(bit in case for bit in args.only.split(","))
    ]
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(root, bindir, user)
        cluster.create()
        if args.check:
            for case in cases:
                for as_text in (False, True):
                    cluster.instructions(case, 2, as_text, counted=False)
                print(f"runs: {case}")
            return
        print(f"PostgreSQL from {bindir}; {args.large - args.small} executions counted per case")
        print()
        print(
            "| statement (one execution = one transaction) | prepared (asyncpg, psycopg, SQLAlchemy):"
            " server instructions per call | x bare | sent as text (Django): per call | x bare |"
        )
        print("|---|---:|---:|---:|---:|")
        bases: dict[bool, int] = {}  # the first case's count, prepared and as text
        for case in cases:
            cells = []
            for as_text in (False, True):
                counts = [cluster.instructions(case, calls, as_text) for calls in (args.large, args.small)]
                per_call = (counts[0] - counts[1]) // (args.large - args.small)
                cells += [f"{per_call:,}", f"{per_call / bases.setdefault(as_text, per_call):.2f}"]
            print(f"| {case} | {' | '.join(cells)} |")


if __name__ == "__main__":
    bp.run_main(main, "interrupted: cluster stopped and removed")
