"""The wheel ships the schema: an installed user (no checkout) can migrate.

Builds the real wheel with pip + hatchling (no network: --no-build-isolation,
--no-index), installs it into a private directory and migrates a fresh
database from that copy in a subprocess that cannot see the checkout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from awa_bridge.migrations import load_migrations

REPO = Path(__file__).resolve().parent.parent
MIGRATIONS = REPO / "migrations"
MIGRATION_NAME = re.compile(r"^v(\d{3})_[a-z0-9_]+\.sql$")


def pip(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(REPO))
    (built,) = out.glob("awa_bridge-*.whl")
    return built


@pytest.mark.slow
def test_wheel_ships_packages_and_identical_migrations(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for package in ("awa_bridge", "awa_django", "awa_sqlalchemy"):
            assert f"{package}/__init__.py" in names, f"{package} missing from {wheel.name}"
            assert f"{package}/py.typed" in names, f"{package} ships no py.typed: type checkers would ignore its hints"
        assert "awa_bridge/sql/queries.sql" in names

        packaged = sorted(n for n in names if n.startswith("awa_bridge/_migrations/"))
        assert packaged == [f"awa_bridge/_migrations/{p.name}" for p in sorted(MIGRATIONS.iterdir())]
        assert "awa_bridge/_migrations/v001_schema.sql" in packaged
        for name in packaged:
            repo_copy = MIGRATIONS / Path(name).name
            assert archive.read(name) == repo_copy.read_bytes(), f"{name} differs from {repo_copy}"


@pytest.mark.slow
def test_installed_wheel_migrates_without_the_checkout(
    wheel: Path, tmp_path: Path, make_database: Callable[[], str]
) -> None:
    site = tmp_path / "site"
    pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel))
    url = make_database()

    snippet = """
import json, sys
import awa_bridge, awa_bridge.migrations
print(json.dumps({
    "file": awa_bridge.__file__,
    "migrations_dir": str(awa_bridge.migrations.migrations_dir()),
    "applied": awa_bridge.migrate(sys.argv[1]),
}))
"""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PYTHONPATH"] = str(site)
    result = subprocess.run(
        [sys.executable, "-c", snippet, url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)

    assert Path(report["file"]).resolve().is_relative_to(site.resolve()), report
    assert Path(report["migrations_dir"]).resolve() == (site / "awa_bridge" / "_migrations").resolve()
    assert report["applied"] == [m.name for m in load_migrations(MIGRATIONS)]
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('awa.jobs') IS NOT NULL").fetchone()[0]

    # The installed CLI agrees that the database is now up to date.
    cli = subprocess.run(
        [sys.executable, "-m", "awa_bridge", "migrate", "--database-url", url, "--dry-run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert "nothing to apply" in cli.stdout


def test_migration_files_are_numbered_contiguously() -> None:
    files = sorted(p.name for p in MIGRATIONS.iterdir())
    assert files, "migrations/ is empty"
    misnamed = [name for name in files if not MIGRATION_NAME.match(name)]
    assert not misnamed, f"not vNNN_snake_name.sql (the runner would skip them): {misnamed}"
    numbers = [int(MIGRATION_NAME.match(name).group(1)) for name in files]
    assert numbers == list(range(1, len(files) + 1)), f"gaps or duplicate numbers: {files}"
    assert [m.name for m in load_migrations(MIGRATIONS)] == files
