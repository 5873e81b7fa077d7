"""The driver boundary: ``awa_bridge/drivers`` is the only place that imports a database driver or runs SQL.

Every other module of ``awa_bridge``, ``awa_django`` and ``awa_sqlalchemy``
goes through the adapters (``fetch_all`` / ``fetch`` / ``execute`` /
``copy_rows`` / ``execute_script`` / ``transaction`` / ``listen``) and opens
connections with ``awa_bridge.drivers.connect``. This test parses each module
with ``ast`` (nothing is imported) and fails on:

* an import of asyncpg, psycopg, psycopg_pool or psycopg2 outside drivers.
  Imports under ``if TYPE_CHECKING:`` are allowed: they exist for type
  checkers only (``conntypes.py`` spells the connection types of the public
  overloads with them), never run, and so neither import a driver at run time
  nor let code reach one;
* a call that is a driver's own API on a raw connection or cursor
  (``fetchrow``, ``fetchval``, ``fetchone``, ``fetchall``, ``executemany``,
  ``cursor``, ``add_listener``, ``copy_records_to_table``, ``exec_driver_sql``
  ...), and a ``.fetch(...)`` / ``.execute(...)`` whose first argument is SQL
  text (a string, an f-string, a concatenation, or ``query.numeric`` /
  ``.pyformat`` / ``.named``). The adapters take a named ``Query``
  (``QUERIES["..."]``), so their calls pass; ``super().execute`` (Django's
  ``BaseCommand``) is not a statement.

Static detection cannot see SQL passed through a variable holding text; the
rule it enforces is the one reviewers can check by eye: statements leave this
package only through ``awa_bridge/drivers``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("awa_bridge", "awa_django", "awa_sqlalchemy")
DRIVERS = ROOT / "awa_bridge" / "drivers"
DRIVER_MODULES = {"asyncpg", "psycopg", "psycopg_pool", "psycopg2"}
RAW_CALLS = {
    "fetchrow",
    "fetchval",
    "fetchone",
    "fetchall",
    "fetchmany",
    "executemany",
    "cursor",
    "add_listener",
    "add_termination_listener",
    "copy_records_to_table",
    "copy_from_query",
    "copy_to_table",
    "exec_driver_sql",
}
SQL_TEXT_ATTRIBUTES = {"numeric", "pyformat", "named"}


def modules() -> list[Path]:
    found = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    return [p for p in found if DRIVERS not in p.parents]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` bodies."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.body:
                inside.update(id(child) for child in ast.walk(statement))
    return inside


def driver_imports(tree: ast.AST) -> list[ast.stmt]:
    typing_only = _typing_only(tree)
    found: list[ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in DRIVER_MODULES for name in names) and id(node) not in typing_only:
            found.append(node)
    return found


def _is_sql_text(arg: ast.expr) -> bool:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return True
    if isinstance(arg, (ast.JoinedStr, ast.BinOp)):
        return True
    return isinstance(arg, ast.Attribute) and arg.attr in SQL_TEXT_ATTRIBUTES


def raw_driver_calls(tree: ast.AST) -> list[ast.Call]:
    found: list[ast.Call] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver, name = node.func.value, node.func.attr
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            continue
        if name in RAW_CALLS or (name in {"fetch", "execute"} and node.args and _is_sql_text(node.args[0])):
            found.append(node)
    return found


def violations() -> list[str]:
    out: list[str] = []
    for path in modules():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        lines = source.splitlines()
        where = path.relative_to(ROOT)
        for node in driver_imports(tree):
            out.append(f"{where}:{node.lineno}: imports a driver: {lines[node.lineno - 1].strip()}")
        for call in raw_driver_calls(tree):
            out.append(f"{where}:{call.lineno}: runs SQL on a raw connection: {lines[call.lineno - 1].strip()}")
    return out


def test_only_the_drivers_package_imports_a_driver_or_runs_sql() -> None:
    found = violations()
    assert not found, "outside awa_bridge/drivers:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("snippet", "imports", "calls"),
    [
        ("import psycopg", 1, 0),
        ("def f():\n    from asyncpg import Connection", 1, 0),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import asyncpg", 0, 0),
        ("from psycopg_pool import ConnectionPool", 1, 0),
        ("await conn.fetchrow(q.numeric, *args)", 0, 1),
        ("conn.execute('SELECT 1')", 0, 1),
        ("await conn.fetch(query.numeric, *query.positional(p))", 0, 1),
        ("cur.execute('EXPLAIN ' + sql, params)", 0, 1),
        ("with conn.cursor() as c: pass", 0, 1),
        ("await db.fetch(QUERIES['claim_jobs'], params)", 0, 0),
        ("db.execute(QUERIES['migration_lock'])", 0, 0),
        ("super().execute(*args, **options)", 0, 0),
    ],
)
def test_the_checks_see_what_they_name(snippet: str, imports: int, calls: int) -> None:
    """The detector itself: raw driver use is flagged, adapter calls and typing-only imports are not."""
    tree = ast.parse(snippet) if "await" not in snippet else ast.parse(f"async def _():\n    {snippet}")
    assert (len(driver_imports(tree)), len(raw_driver_calls(tree))) == (imports, calls)
