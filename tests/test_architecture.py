"""The worker's parts talk through narrow interfaces (docs/adr/002): what the source may not refer to.

The worker's parts (every module but ``runtime.py`` and ``client.py``) and the layers above the
worker (``awa_bridge/celery``, ``awa_django``, ``awa_sqlalchemy``) never import or name ``Runtime``;
those layers never touch a job's private state (``job._x``).

Read from the source with ``ast`` (no database): a back-reference to the whole runtime, or a
layer reaching into a job's private state, is a dependency these tests refuse before it ships.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from awa_bridge.worker.context import JobContext

PACKAGE = Path(__file__).resolve().parents[1] / "awa_bridge"
WORKER = PACKAGE / "worker"
CELERY = sorted((PACKAGE / "celery").rglob("*.py"))
# The layers on top of the worker: the Celery layer and the framework integrations.
LAYERS = CELERY + sorted(p for name in ("awa_django", "awa_sqlalchemy") for p in (PACKAGE.parent / name).rglob("*.py"))
# Only these construct or import the runtime: the runtime itself and the public Client that owns it.
OWNERS_OF_THE_RUNTIME = {WORKER / "runtime.py", WORKER / "client.py"}
JOB_NAMES = {"job", "ctx"}  # what the worker and the Celery layer call a JobContext


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _runtime_references(path: Path) -> list[str]:
    """Every import of the runtime module and every use of the name ``Runtime`` or ``_runtime``."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[-1] == "runtime" or any(alias.name in ("runtime", "Runtime") for alias in node.names):
                found.append(f"line {node.lineno}: from {'.' * node.level}{module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.endswith(".runtime")]
        elif isinstance(node, ast.Name) and node.id == "Runtime":
            found.append(f"line {node.lineno}: Runtime")
        elif isinstance(node, ast.Attribute) and node.attr in ("Runtime", "_runtime"):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in ("Runtime", "_runtime"):
            found.append(f"line {node.lineno}: {node.value!r}")  # a string annotation or a getattr
    return found


WORKER_PARTS = sorted(p for p in WORKER.rglob("*.py") if p not in OWNERS_OF_THE_RUNTIME)


@pytest.mark.parametrize("path", WORKER_PARTS + LAYERS, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_part_of_the_worker_and_no_layer_above_it_refers_to_the_runtime(path: Path) -> None:
    assert _runtime_references(path) == [], f"{path.relative_to(PACKAGE.parent)} reaches the whole runtime"


def test_the_checks_see_what_they_refuse(tmp_path: Path) -> None:
    """The parametrized tests can fail: the Client's import is seen, and so is a planted back-reference."""
    assert _runtime_references(WORKER / "client.py")
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from ..worker.runtime import Runtime\nx = job._runtime\ny = self.job._cancelled\n"
        "z = getattr(self.job, '_cancelled', None)\n"
    )
    assert len(_runtime_references(sample)) == 2
    assert _private_job_attributes(sample) == ["line 2: ._runtime", "line 3: ._cancelled", "line 4: getattr _cancelled"]


def _private_job_attributes(path: Path) -> list[str]:
    """``job._x`` / ``ctx._x`` / ``self.job._x``: a JobContext's private state used from outside the worker."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and _is_job(node.value):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            owner, name = [*node.args, None, None][:2]
            if _is_job(owner) and isinstance(name, ast.Constant) and str(name.value).startswith("_"):
                found.append(f"line {node.lineno}: {node.func.id} {name.value}")
    return found


def _is_job(node: ast.expr | None) -> bool:
    return (isinstance(node, ast.Name) and node.id in JOB_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in JOB_NAMES
    )


@pytest.mark.parametrize("path", LAYERS, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_the_layers_above_the_worker_use_only_the_public_job_api(path: Path) -> None:
    assert _private_job_attributes(path) == []


def test_the_private_state_the_celery_layer_must_not_touch_exists() -> None:
    """The names the check above guards are really JobContext's private state (and stay that way)."""
    private = {name for name in dir(JobContext) if name.startswith("_") and not name.startswith("__")}
    assert {"_handle", "_cancelled", "_lost", "_task"} <= private
    public = ("cancelled", "cancel", "attached", "raise_max_attempts", "flush_progress", "register_callback")
    assert all(hasattr(JobContext, name) for name in public)


def test_an_attempts_private_state_is_its_own() -> None:
    """The worker's bookkeeping has class-level defaults (a JobContext is built per claimed job);
    what one attempt records must never show on another."""

    def job(job_id: int) -> JobContext:
        return JobContext(
            id=job_id,
            kind="k",
            queue="q",
            args=None,
            raw_args={},
            attempt=1,
            max_attempts=3,
            priority=2,
            metadata={},
            tags=[],
            run_lease=1,
            progress=None,
            deadline_at=None,
        )

    first, second = job(1), job(2)
    first.update_metadata({"step": 1})
    first.on_complete(print)
    first.set_progress(50)
    first.cancel()
    assert (first._metadata_patch, first._on_complete, first.cancelled) == ({"step": 1}, (print,), True)
    assert (second._metadata_patch, second._on_complete, second._progress_dirty, second.cancelled) == (
        None,
        (),
        False,
        False,
    )
    assert first.pending_progress()[1] == '{"step":1}' and second.pending_progress() == (None, "{}")
    first.mark_flushed()
    assert first.pending_progress() == (None, "{}")
