"""Golden cases of the schema contract (docs/design.md): kind derivation and unique keys (no database)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from awa_bridge import UniqueOpts, canonical_json, derive_kind, prepare_job, unique_key
from awa_bridge.args import format_float


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("SendConfirmationEmail", "send_confirmation_email"),
        ("SMTPEmail", "smtp_email"),
        ("OAuthRefresh", "o_auth_refresh"),
        ("PDFRenderJob", "pdf_render_job"),
        ("ProcessV2Import", "process_v2_import"),
        ("ReconcileQ3Revenue", "reconcile_q3_revenue"),
        ("HTMLToPDF", "html_to_pdf"),
        ("IOError", "io_error"),
    ],
)
def test_kind_derivation(name: str, kind: str) -> None:
    assert derive_kind(name) == kind


@dataclass
class SendEmail:
    to: str
    subject: str


def test_design_example_unique_key() -> None:
    job = prepare_job(SendEmail(to="a@b.com", subject="Hi"), unique=True)
    assert job.kind == "send_email"
    assert job.unique_key is not None
    assert job.unique_key.hex() == "917d72099c79c6dd28577111373d14be"
    assert job.unique_states == "11111000"


def test_unique_key_components_change_the_key() -> None:
    args = canonical_json({"a": 1})
    base = unique_key("k", "q", args, UniqueOpts())
    assert unique_key("k", "other", args, UniqueOpts()) == base  # queue not part by default
    assert unique_key("k", "other", args, UniqueOpts(by_queue=True)) != base
    assert unique_key("k", "q", canonical_json({"a": 2}), UniqueOpts(by_args=False)) == unique_key(
        "k", "q", args, UniqueOpts(by_args=False)
    )
    assert unique_key("k", "q", args, UniqueOpts(by_period=1)) != unique_key("k", "q", args, UniqueOpts(by_period=2))
    assert len(base) == 16


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5e-5, "0.000015"),
        (9.5e-5, "0.000095"),
        (1e-5, "0.00001"),
        (-1.5e-5, "-0.000015"),
        (9.99e-6, "9.99e-6"),
        (1e-7, "1e-7"),
        (1.234e-10, "1.234e-10"),
        (1e-4, "0.0001"),
        (1e20, "1e+20"),
        (0.1, "0.1"),
        (1.0, "1.0"),
        (5e-324, "5e-324"),
    ],
)
def test_float_spelling_matches_serde_json(value: float, text: str) -> None:
    assert format_float(value) == text


def test_canonical_json_sorts_keys_and_keeps_unicode() -> None:
    assert canonical_json({"b": 1, "a": ["é", None, True]}) == '{"a":["é",null,true],"b":1}'
    assert canonical_json({"n": -(2**63)}) == '{"n":-9223372036854775808}'
    assert canonical_json({"x": {"v": 1e-7}}) == '{"x":{"v":1e-7}}'


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        "plain",
        {"z": 1, "a": {"y": [1, 2.5, -3, True, None], "b": ""}},
        {'quote"back\\slash': "line\nbreak\ttab\u2028sep\u0001ctl"},
        {"ünï": "çødé 😀", "emoji😀": ["é"]},
        {"t": (1, "two", (3.0,))},
        {"big": 2**63 - 1, "f": 1e20, "g": -0.5},
    ],
)
def test_canonical_json_is_json_dumps_sorted_compact_and_unescaped(value: object) -> None:
    """The encoder built once (CPython's C one) writes what ``json.dumps`` writes with the same options."""
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    assert canonical_json(value) == expected
