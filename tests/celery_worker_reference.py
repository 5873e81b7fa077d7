"""How ``CELERY_WORKER`` in tests/test_celery_canvas.py was recorded: real Celery 5.7 with its worker.

Not run by the suite (it needs Redis and a Celery worker). With Redis at 127.0.0.1:6379 and
``pip install redis``::

    celery -A tests.celery_worker_reference worker -c 2 --loglevel=warning &
    python -m tests.celery_worker_reference

It prints each flow's outcome; the test keeps them as its expected values (Redis database 13).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from celery import Celery, chain, chord, group
from celery.result import AsyncResult, GroupResult

app = Celery("canvas_ref", broker="redis://127.0.0.1:6379/13", backend="redis://127.0.0.1:6379/13")
app.conf.result_extended = True
ERRBACKS = "/tmp/celery_worker_reference_errbacks.log"


@app.task(name="canvas.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="canvas.mul")
def mul(x: int, y: int) -> int:
    return x * y


@app.task(name="canvas.tsum")
def tsum(values: list[int]) -> int:
    return sum(values)


@app.task(name="canvas.echo")
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@app.task(name="canvas.fail")
def fail(x: Any) -> None:
    raise ValueError(f"boom {x}")


@app.task(name="canvas.on_error")
def on_error(request: Any, exc: BaseException, traceback: Any) -> str:
    with open(ERRBACKS, "a") as handle:
        handle.write(f"{request.id} {type(exc).__name__} {exc}\n")
    return "handled"


def show(label: str, call: Any) -> None:
    try:
        print(label, "=>", repr(call()))
    except Exception as exc:
        print(label, "raises", repr(exc))


def main() -> None:
    T = 20
    show(
        "group in a chord header",
        lambda: chord([add.s(1, 1), group(add.s(2, 2), add.s(3, 3)), add.s(4, 4)], echo.s())().get(timeout=T),
    )
    show(
        "group in a group",
        lambda: group(add.s(1, 1), group(add.s(2, 2), add.s(3, 3)), add.s(4, 4)).delay().get(timeout=T),
    )
    show(
        "chord in a group",
        lambda: group(add.s(1, 1), chord([add.s(2, 2), add.s(3, 3)], tsum.s())).delay().get(timeout=T),
    )
    show(
        "chord in a chord header",
        lambda: chord([add.s(1, 1), chord([add.s(2, 2), add.s(3, 3)], tsum.s())], echo.s())().get(timeout=T),
    )
    show("chain in a chord header", lambda: chord([add.s(1, 1), add.s(2, 2) | mul.s(10)], echo.s())().get(timeout=T))
    show("group of chains", lambda: group(add.s(1, 1) | mul.s(2), add.s(2, 2) | mul.s(3)).delay().get(timeout=T))
    show("chain of chains", lambda: chain(add.s(1, 1) | mul.s(2), add.s(3) | mul.s(10)).delay().get(timeout=T))
    show(
        "chain: group, then a task", lambda: (add.s(1, 1) | group(mul.s(2), mul.s(3)) | tsum.s()).delay().get(timeout=T)
    )
    show(
        "chain: chord, then a task",
        lambda: (chord([add.s(1, 1), add.s(2, 2)], tsum.s()) | mul.s(10)).delay().get(timeout=T),
    )
    show("chain ending in a group", lambda: (add.s(1, 1) | group(mul.s(2), mul.s(3))).delay().get(timeout=T))
    show("chunks", lambda: add.chunks(zip(range(5), range(5), strict=True), 2).delay().get(timeout=T))
    show("map", lambda: tsum.map([[1, 2], [3, 4]]).delay().get(timeout=T))
    show("starmap", lambda: add.starmap([(1, 2), (3, 4)]).delay().get(timeout=T))
    show(
        "chord of chunks",
        lambda: chord(add.chunks(zip(range(4), range(4), strict=True), 2).group(), echo.s())().get(timeout=T),
    )

    Path(ERRBACKS).write_text("")
    failed = chord([add.s(1, 1), fail.s(2)], tsum.s().on_error(on_error.s()))()
    show("chord member fails: get", lambda: failed.get(timeout=T))
    time.sleep(1.5)
    print("chord member fails: state", failed.state, repr(failed.result))
    show("chord member fails: fresh get", lambda: AsyncResult(failed.id, app=app).get(timeout=T))
    print("chord member fails: errback", Path(ERRBACKS).read_text().strip(), "(callback id", failed.id + ")")
    show(
        "nested group member fails",
        lambda: chord([add.s(1, 1), group(add.s(1, 1), fail.s(4))], tsum.s())().get(timeout=T),
    )
    in_group = group(add.s(1, 1), chord([fail.s(5), add.s(1, 1)], tsum.s())).delay()
    show("chord in a group fails", lambda: in_group.get(timeout=T))
    print("chord in a group fails: states", [r.state for r in in_group.results])
    in_header = chord([add.s(1, 1), chord([fail.s(7), add.s(1, 1)], tsum.s())], echo.s())()
    show("chord in a chord header fails: get", lambda: in_header.get(timeout=T))
    time.sleep(1.5)
    print("chord in a chord header fails: outer state", in_header.state)

    broken = (add.s(1, 1) | fail.s() | add.s(1) | mul.s(2)).delay()
    show("failed chain: get", lambda: broken.get(timeout=T))
    time.sleep(1)
    node, seen = broken, []
    while node is not None:
        seen.append(node.state)
        node = node.parent
    print("failed chain: states, last first", seen)
    fresh = AsyncResult(broken.id, app=app)
    print("failed chain: last step name, args", fresh.name, fresh.args, repr(fresh.result))
    then_chord = (add.s(1, 1) | fail.s() | group(add.s(1), add.s(2)) | tsum.s()).delay()
    show("failed chain before a chord: get", lambda: then_chord.get(timeout=T))
    time.sleep(1)
    print("failed chain: the chord after it", then_chord.state, [r.state for r in then_chord.parent.results])

    saved = group(add.s(i, i) for i in range(3)).delay()
    saved.save()
    back = GroupResult.restore(saved.id, app=app)
    print("restore", back is not None and back.id == saved.id, back.get(timeout=T) if back else None)
    print("restore never saved", GroupResult.restore("never-saved", app=app))
    saved.delete()
    print("restore after delete", app.GroupResult.restore(saved.id))


if __name__ == "__main__":
    main()
