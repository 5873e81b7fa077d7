"""The core example runs end to end as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_example_runs_end_to_end(make_database) -> None:
    url = make_database()
    result = subprocess.run(
        [sys.executable, "examples/quickstart.py"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "second order rolled back (payment declined): its job is gone with it" in out
    assert "again with overlap: 5 written, 6 skipped" in out
    assert "confirmation emails 'sent' to: ada@example.com" in out
    after = out.split("After the worker")[1]
    assert "daily_report               completed  35" in after
    assert "send_confirmation_email    completed  1" in after
    assert "available" not in after
