"""The shipped type hints: mypy (strict) accepts the documented forms and rejects the mistakes.

Runs mypy as a user's CI would, in a subprocess, on two small files under
tests/typing: one that must type-check cleanly (``assert_type`` of each
overload) and one whose every ``# expect-error`` line must be reported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.own_server]  # mypy only

HERE = Path(__file__).parent / "typing"
ROOT = Path(__file__).resolve().parent.parent


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context", str(path)],
        cwd=ROOT,
        # The django-stubs plugin loads tests/typing/django_settings.py, which installs the shop example's app.
        env={**os.environ, "PYTHONPATH": str(ROOT / "examples" / "django_shop")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_documented_forms_type_check() -> None:
    result = mypy(HERE / "check_insert_overloads.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mistakes_are_reported() -> None:
    path = HERE / "reject_mistakes.py"
    expected = {i for i, line in enumerate(path.read_text().splitlines(), 1) if "# expect-error" in line}
    result = mypy(path)
    reported = {int(m.group(1)) for m in re.finditer(rf"{re.escape(path.name)}:(\d+): error", result.stdout)}
    assert expected <= reported, f"not flagged: {sorted(expected - reported)}\n{result.stdout}"
