"""Named SQL statements, compiled once for each driver's parameter style.

``queries.sql`` holds every runtime statement as a ``-- name:`` block written
with ``%(name)s`` parameters. Each block is compiled into:

* ``pyformat`` — as written, for psycopg and Django cursors;
* ``numeric`` — ``$1, $2 ...`` plus the parameter order, for asyncpg;
* ``named`` — ``:name``, for SQLAlchemy ``text()``.

Queries are looked up by name (``QUERIES["insert_job"]``), never assembled
from strings at call time.

A ``-- fragment:`` block is a piece of SQL several statements share (the job
projection, for one), written once. A query includes it with
``/* include: NAME */``; the text is substituted when the file is loaded, so
the compiled statements are plain SQL and a fragment is never a query itself.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PARAM = re.compile(r"%\((\w+)\)s")
_BLOCK_LINE = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"/\*\s*include:\s*(\w+)\s*\*/")


@dataclass(frozen=True)
class Query:
    """One named statement in every parameter style."""

    name: str
    pyformat: str
    numeric: str
    named: str
    order: tuple[str, ...]

    def positional(self, params: dict[str, Any]) -> tuple[Any, ...]:
        """Parameters in ``$n`` order for asyncpg."""
        return self._pick(params) if self.order else ()

    @functools.cached_property
    def _pick(self) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
        # One C call instead of a Python loop per parameter on every execution
        # (cached_property writes the instance dict, which a frozen dataclass allows).
        if len(self.order) == 1:
            key = self.order[0]
            return lambda params: (params[key],)
        return operator.itemgetter(*self.order)


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


def _blocks(source: str) -> list[tuple[str, str, str]]:
    """``(kind, name, body)`` of each block; comment lines before and after each body are dropped."""
    heads = list(_BLOCK_LINE.finditer(source))
    blocks: list[tuple[str, str, str]] = []
    for index, match in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(source)
        lines = source[match.end() : end].strip().splitlines()
        while lines and lines[0].startswith("--"):
            lines.pop(0)
        # A section header between two blocks belongs to the next one, not to this body.
        while lines and (not lines[-1].strip() or lines[-1].startswith("--")):
            lines.pop()
        blocks.append((match.group(1), match.group(2), "\n".join(lines).strip()))
    return blocks


def expand_includes(name: str, text: str, fragments: dict[str, str]) -> str:
    """Replace each ``/* include: NAME */`` in ``text`` with that fragment's SQL."""

    def fragment(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in fragments:
            raise ValueError(f"{name}: unknown fragment {key!r} (fragments: {', '.join(sorted(fragments))})")
        return fragments[key]

    return _INCLUDE.sub(fragment, text)


def load_queries(path: Path) -> dict[str, Query]:
    """Parse a file of ``-- name:`` and ``-- fragment:`` blocks into compiled queries.

    A fragment must be defined before the blocks that include it (read top to bottom, the file
    then explains itself; a fragment may include an earlier one), and must be used.
    """
    fragments: dict[str, str] = {}
    used: set[str] = set()
    queries: dict[str, Query] = {}
    for kind, name, body in _blocks(path.read_text(encoding="utf-8")):
        if name in queries or name in fragments:
            raise ValueError(f"duplicate block name {name!r} in {path.name}")
        used.update(_INCLUDE.findall(body))
        if kind == "fragment":
            fragments[name] = expand_includes(f"fragment {name}", body, fragments)
            continue
        queries[name] = compile_query(name, expand_includes(f"query {name}", body, fragments))
    unused = sorted(set(fragments) - used)
    if unused:
        raise ValueError(f"{path.name}: fragment(s) never included: {', '.join(unused)}")
    return queries


QUERIES: dict[str, Query] = load_queries(Path(__file__).with_name("queries.sql"))
