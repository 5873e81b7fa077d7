"""Named SQL statements, compiled once for each driver's parameter style.

``queries.sql`` holds every runtime statement as a ``-- name:`` block written
with ``%(name)s`` parameters. Each block is compiled into:

* ``pyformat`` — as written, for psycopg and Django cursors;
* ``numeric`` — ``$1, $2 ...`` plus the parameter order, for asyncpg;
* ``named`` — ``:name``, for SQLAlchemy ``text()``.

Queries are looked up by name (``QUERIES["insert_job"]``), never assembled
from strings at call time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PARAM = re.compile(r"%\((\w+)\)s")
_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Query:
    """One named statement in every parameter style."""

    name: str
    pyformat: str
    numeric: str
    named: str
    order: tuple[str, ...]

    def positional(self, params: dict[str, Any]) -> list[Any]:
        """Parameters in ``$n`` order for asyncpg."""
        return [params[key] for key in self.order]


def compile_query(name: str, text: str) -> Query:
    """Compile a pyformat block into the other two styles."""
    if re.search(r"%\(\w+\)s::", text):
        raise ValueError(f"query {name}: write CAST(%(x)s AS type), not %(x)s::type")
    order: list[str] = []

    def to_numeric(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    numeric = _PARAM.sub(to_numeric, text).replace("%%", "%")
    named = _PARAM.sub(lambda m: f":{m.group(1)}", text).replace("%%", "%")
    return Query(name=name, pyformat=text, numeric=numeric, named=named, order=tuple(order))


def load_queries(path: Path) -> dict[str, Query]:
    """Parse a file of ``-- name:`` blocks; comment lines before and after each body are dropped."""
    source = path.read_text(encoding="utf-8")
    names = list(_NAME_LINE.finditer(source))
    queries: dict[str, Query] = {}
    for index, match in enumerate(names):
        end = names[index + 1].start() if index + 1 < len(names) else len(source)
        lines = source[match.end() : end].strip().splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        # A section header between two blocks belongs to the next one, not to this body.
        while lines and (not lines[-1].strip() or lines[-1].startswith("--")):
            lines.pop()
        body = "\n".join(lines).strip()
        if match.group(1) in queries:
            raise ValueError(f"duplicate query name {match.group(1)!r} in {path.name}")
        queries[match.group(1)] = compile_query(match.group(1), body)
    return queries


QUERIES: dict[str, Query] = load_queries(Path(__file__).with_name("queries.sql"))
