"""The named-statement loader: blocks, parameter styles and shared fragments (no database)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from awa_bridge.sql import QUERIES, load_queries

from .test_contract import JOBS_COLUMNS

JOB_COLUMNS = [name for name, _type in JOBS_COLUMNS]


def load(tmp_path: Path, text: str) -> dict[str, object]:
    path = tmp_path / "queries.sql"
    path.write_text(text, encoding="utf-8")
    return dict(load_queries(path))


def test_a_fragment_is_expanded_in_every_style_and_is_not_a_query(tmp_path: Path) -> None:
    queries = load(
        tmp_path,
        """-- name: first
SELECT 1

-- fragment: cols
-- why these columns
id, kind, CAST(%(label)s AS text) AS label

-- name: one
SELECT /* include: cols */ FROM awa.jobs WHERE id = %(id)s

-- name: two
-- a comment
UPDATE awa.jobs SET kind = %(kind)s RETURNING /*include:cols*/
""",
    )
    assert sorted(queries) == ["first", "one", "two"]
    one = load_queries(tmp_path / "queries.sql")["one"]
    assert one.pyformat == "SELECT id, kind, CAST(%(label)s AS text) AS label FROM awa.jobs WHERE id = %(id)s"
    assert one.numeric == "SELECT id, kind, CAST($1 AS text) AS label FROM awa.jobs WHERE id = $2"
    assert one.order == ("label", "id")
    assert one.named == "SELECT id, kind, CAST(:label AS text) AS label FROM awa.jobs WHERE id = :id"
    two = load_queries(tmp_path / "queries.sql")["two"]
    assert two.numeric == "UPDATE awa.jobs SET kind = $1 RETURNING id, kind, CAST($2 AS text) AS label"


def test_a_fragment_may_include_an_earlier_one(tmp_path: Path) -> None:
    text = (
        "-- fragment: f\nid = %(id)s\n\n"
        "-- fragment: g\nWHERE /* include: f */\n\n"
        "-- name: q\nSELECT 1 /* include: g */\n"
    )
    assert load(tmp_path, text)["q"].numeric == "SELECT 1 WHERE id = $1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: q\nSELECT /* include: nope */\n", "query q: unknown fragment 'nope'"),
        ("-- name: q\nSELECT /* include: f */\n\n-- fragment: f\n1\n", "query q: unknown fragment 'f'"),
        ("-- fragment: f\n1\n\n-- name: q\nSELECT 2\n", "fragment.s. never included: f"),
        ("-- fragment: g\n/* include: f */\n\n-- fragment: f\n1\n", "fragment g: unknown fragment 'f'"),
        ("-- fragment: f\n1\n\n-- name: f\nSELECT /* include: f */\n", "duplicate block name 'f'"),
        ("-- name: q\nSELECT 1\n\n-- name: q\nSELECT 2\n", "duplicate block name 'q'"),
    ],
)
def test_bad_fragments_are_refused_when_the_file_loads(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load(tmp_path, text)


def test_the_job_projection_is_one_fragment_with_the_27_contract_columns() -> None:
    source = Path(__file__).resolve().parent.parent.joinpath("awa_bridge", "sql", "queries.sql").read_text()
    assert source.count("-- fragment: job_columns") == 1
    assert source.count("j.callback_transform, j.run_lease") == 1, "the projection is spelled out once"
    users = [
        "get_job",
        "retry_job",
        "cancel_job",
        "cancel_by_unique_key",
        "run_job_now",
        "delete_job",
        "get_job_with_result",
    ]
    for name in users:
        assert "/* include:" not in QUERIES[name].pyformat, name
        projection = QUERIES[name].pyformat.split("j.id, j.kind", 1)[1].split("j.progress::text AS progress", 1)[0]
        columns = ["id", "kind", *re.findall(r"\bj\.(\w+)", projection), "progress"]
        assert columns == JOB_COLUMNS, name
