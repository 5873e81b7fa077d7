"""Celery compatibility, deep (issue 13): canvas, update_state, time limits, signals, kombu's JSON,
retry counting, settings and inspect. Each behaviour runs on the real awa worker against real
PostgreSQL, and, where Celery can run it without a broker, side by side with real Celery 5.7 in
eager mode: the test computes Celery's outcome in the same run and compares."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

import celery
import pytest

from awa_bridge.celery import (
    AsyncResult,
    Celery,
    ChordError,
    GroupResult,
    TaskError,
    UnsupportedOption,
    chain,
    chord,
    group,
    signals,
    signature,
    states,
)
from awa_bridge.worker import Client

from . import celery_canvas_app as canvas
from .celery_canvas_app import add, fail, mul, tsum
from .test_celery_compat import refused_alike_when_eager
from .waiting import FAST, wait_until

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def app(db_url: str) -> Any:
    canvas.app.conf.database_url = db_url
    canvas.ERRBACKS.clear()
    yield canvas.app
    canvas.app.close()


@pytest.fixture
def ref() -> Any:
    return canvas.reference_app()


@pytest.fixture
async def worker(app: Celery, db_url: str) -> AsyncIterator[Callable[..., Awaitable[Client]]]:
    clients: list[Client] = []

    async def start() -> Client:
        client = Client(db_url, **FAST)
        app.install(client)
        clients.append(client)
        await client.start(["default"])
        return client

    yield start
    for client in clients:
        await client.shutdown(timeout=2)


async def get(result: Any, timeout: float = 20, **kwargs: Any) -> Any:
    """``result.get`` blocks: run it beside the worker's event loop."""
    return await asyncio.to_thread(result.get, timeout=timeout, interval=0.02, **kwargs)


def t(app: Any, name: str) -> Any:
    return app.tasks[f"canvas.{name}"]


# -- signatures -------------------------------------------------------------------------------------------


def test_signatures_build_and_apply_partially_as_celerys(app: Celery, ref: Any) -> None:
    for side in (app, ref):
        s = t(side, "add").s(2)
        assert s.args == (2,) and s.task == "canvas.add"
        assert s.clone((1,)).args == (1, 2)  # new args first, as Celery's partial application
        assert t(side, "add").si(2, 2).immutable
        assert s.set(queue="math").options["queue"] == "math"
    ours = signature("canvas.add", (2,), {"y": 3}, {"queue": "q"}, app=app)
    theirs = celery.signature("canvas.add", (2,), {"y": 3}, {"queue": "q"}, app=ref)
    assert (
        dict(ours)
        == dict(theirs)
        == {
            "task": "canvas.add",
            "args": (2,),
            "kwargs": {"y": 3},
            "options": {"queue": "q"},
            "subtask_type": None,
            "immutable": False,
        }
    )
    assert dict(t(app, "add").s(2).set(queue="math")) == dict(t(ref, "add").s(2).set(queue="math"))
    assert ours() == theirs() == 5  # calling a signature runs the task here


# -- the canvas on the real worker, beside Celery's eager outcome ----------------------------------------------


async def test_chain_passes_each_value_on(worker: Any, app: Celery, ref: Any) -> None:
    theirs = (t(ref, "add").s(2, 2) | t(ref, "add").s(4) | t(ref, "mul").s(3)).delay().get()
    await worker()
    result = (t(app, "add").s(2, 2) | t(app, "add").s(4) | t(app, "mul").s(3)).delay()
    assert await get(result) == theirs == 24
    assert await get(result.parent) == 8 and await get(result.parent.parent) == 4
    immutable = chain(t(app, "add").s(1, 1), t(app, "add").si(10, 10)).apply_async()
    assert await get(immutable) == 20


async def test_group_results_come_back_in_group_order(worker: Any, app: Celery, ref: Any) -> None:
    theirs = celery.group(t(ref, "slow_add").s(i, i) for i in range(8)).delay().get()
    await worker()
    result = group(t(app, "slow_add").s(i, i) for i in range(8)).delay()
    assert isinstance(result, GroupResult) and len(result) == 8
    assert await get(result) == theirs == [2 * i for i in range(8)]
    assert result.ready() and result.successful() and result.completed_count() == 8


async def test_a_failed_group_member_raises_its_own_error(worker: Any, app: Celery, ref: Any) -> None:
    with pytest.raises(ValueError, match="boom 1") as theirs:
        celery.group(t(ref, "add").s(1, 1), t(ref, "fail").s(1), t(ref, "add").s(2, 2)).delay().get()
    await worker()
    result = group(t(app, "add").s(1, 1), t(app, "fail").s(1), t(app, "add").s(2, 2)).delay()
    with pytest.raises(ValueError, match="boom 1") as ours:
        await get(result)
    assert str(ours.value) == str(theirs.value)
    their_values = celery.group(t(ref, "add").s(1, 1), t(ref, "fail").s(1), t(ref, "add").s(2, 2)).delay()
    their_values = their_values.get(propagate=False)
    values = await get(result, propagate=False)
    assert [type(v) for v in values] == [type(v) for v in their_values] == [int, ValueError, int]
    assert values[0::2] == their_values[0::2] == [2, 4] and str(values[1]) == str(their_values[1])


async def test_chord_callback_gets_the_header_values_in_order(worker: Any, app: Celery, ref: Any) -> None:
    theirs = celery.chord(t(ref, "slow_add").s(i, 1) for i in range(6))(t(ref, "tsum").s()).get()
    await worker()
    result = chord(t(app, "slow_add").s(i, 1) for i in range(6))(t(app, "tsum").s())
    assert await get(result) == theirs == 21
    assert [await get(r) for r in result.parent.results] == [i + 1 for i in range(6)]
    listed = chord([t(app, "add").s(i, 0) for i in range(3)], t(app, "echo").s()).delay()
    assert (await get(listed))["args"] == [[0, 1, 2]]


async def test_a_chain_with_a_group_then_a_task_becomes_a_chord(worker: Any, app: Celery, ref: Any) -> None:
    ref_flow = t(ref, "add").s(1, 1) | celery.group(t(ref, "mul").s(i) for i in range(1, 4)) | t(ref, "tsum").s()
    theirs = ref_flow.delay().get()
    await worker()
    flow = t(app, "add").s(1, 1) | group(t(app, "mul").s(i) for i in range(1, 4)) | t(app, "tsum").s()
    assert isinstance(flow, chain) and isinstance(flow._steps()[1], chord)
    assert await get(flow.delay()) == theirs == 12  # 2*1 + 2*2 + 2*3


async def test_a_failed_chord_member_fails_the_callback_with_chord_error(worker: Any, app: Celery, ref: Any) -> None:
    # Celery eager raises the member's own error from the chord call. Its real worker (recorded in
    # CELERY_WORKER): get() on the chord's result raises the member's error (its header, the result's
    # parent, is checked first); the callback never runs and ends FAILURE with ChordError("Dependency
    # <member id> raised ..."), which a fresh AsyncResult(id).get() raises; link_error runs with it.
    with pytest.raises(ValueError, match="boom 2"):
        celery.chord([t(ref, "add").s(1, 1), t(ref, "fail").s(2)])(t(ref, "tsum").s())
    await worker()
    errback = t(app, "on_error").s()
    result = chord([t(app, "add").s(1, 1), t(app, "fail").s(2)], t(app, "tsum").s().on_error(errback)).delay()
    with pytest.raises(ValueError, match="boom 2"):
        await get(result)
    fresh = AsyncResult(result.id, app=app)
    with pytest.raises(ChordError) as caught:
        await get(fresh)
    member = result.parent.results[1]
    assert str(caught.value) == f"Dependency {member.id} raised ValueError('boom 2')"
    assert fresh.state == CELERY_WORKER["chord member fails: state"] == states.FAILURE
    await wait_until(lambda: any(r[0] == result.id for r in canvas.ERRBACKS))
    (seen,) = [r for r in canvas.ERRBACKS if r[0] == result.id]
    assert seen[1:] == (CELERY_WORKER["chord member fails: errback"], str(caught.value))


async def test_link_and_link_error_run_as_celerys(worker: Any, app: Celery, ref: Any) -> None:
    canvas.ERRBACKS.clear()
    with pytest.raises(ValueError):
        t(ref, "fail").apply_async((7,), link_error=t(ref, "on_error").s()).get()
    theirs = list(canvas.ERRBACKS)
    canvas.ERRBACKS.clear()
    await worker()
    linked = t(app, "add").s(2, 3)
    follow = linked.link(t(app, "mul").s(10).set(task_id="link-follow-up"))
    linked.delay()
    assert await get(AsyncResult(follow.id, app=app)) == 50
    failing = t(app, "fail").apply_async((7,), link_error=t(app, "on_error").s())
    with pytest.raises(ValueError, match="boom 7"):
        await get(failing)
    await wait_until(lambda: canvas.ERRBACKS)
    assert [(name, text) for _, name, text in canvas.ERRBACKS] == [(name, text) for _, name, text in theirs]
    assert canvas.ERRBACKS[0][0] == failing.id


async def test_a_failed_chain_step_fails_the_later_steps_as_celerys_worker(worker: Any, app: Celery, ref: Any) -> None:
    # Celery eager raises the step's error from the call; its real worker (CELERY_WORKER) never
    # sends the later steps but marks their results FAILURE with that error; a chord after the
    # failed step has its callback marked FAILURE too, its header left PENDING.
    with pytest.raises(ValueError, match="boom 2"):
        (t(ref, "add").s(1, 1) | t(ref, "fail").s() | t(ref, "add").s(1)).delay()
    await worker()
    result = (t(app, "add").s(1, 1) | t(app, "fail").s() | t(app, "add").s(1) | t(app, "mul").s(2)).delay()
    with pytest.raises(ValueError, match="boom 2"):
        await get(result)
    steps = [result, result.parent, result.parent.parent, result.parent.parent.parent]
    await wait_until(lambda: AsyncResult(steps[2].id, app=app).state == states.FAILURE)
    assert [AsyncResult(r.id, app=app).state for r in steps] == CELERY_WORKER["failed chain: states, last first"]
    fresh = AsyncResult(result.id, app=app)
    assert (fresh.name, fresh.args) == CELERY_WORKER["failed chain: last step name, args"] == ("canvas.mul", [2])
    with pytest.raises(ValueError, match="boom 2"):  # a fresh handle raises the step's error too
        await get(fresh)
    assert repr(await get(fresh, propagate=False)) == "ValueError('boom 2')"
    then_chord = t(app, "add").s(1, 1) | t(app, "fail").s() | group(t(app, "add").s(1), t(app, "add").s(2))
    then_chord |= t(app, "tsum").s()
    flow = then_chord.delay()
    with pytest.raises(ValueError, match="boom 2"):
        await get(flow)
    await wait_until(lambda: flow.parent.parent.state == states.FAILURE)
    assert [flow.state, [r.state for r in flow.parent.results]] == CELERY_WORKER["failed chain: the chord after it"]
    with pytest.raises(ValueError, match="boom 2"):
        await get(AsyncResult(flow.id, app=app))


def test_canvas_in_eager_mode_gives_celerys_outcomes(ref: Any) -> None:
    ours = Celery("eager_canvas", set_as_current=False, task_always_eager=True)
    for fun in (add, mul, tsum, fail, canvas.echo):
        ours.task(name=f"canvas.{fun.__name__}")(fun)
    nested = {name: _value(flow().get()) for name, flow in _nested_flows(ours).items()}
    assert nested == {name: _value(flow().get()) for name, flow in _nested_flows(ref).items()}
    flows = [
        lambda a: (t(a, "add").s(2, 2) | t(a, "mul").s(5)).delay().get(),
        lambda a: [r.get() for r in _group(a)(t(a, "add").s(i, i) for i in range(4)).delay().results],
        lambda a: _chord(a)(t(a, "add").s(i, 1) for i in range(4))(t(a, "tsum").s()).get(),
        lambda a: (
            (t(a, "add").s(1, 1) | _group(a)(t(a, "mul").s(i) for i in range(3)) | t(a, "tsum").s()).delay().get()
        ),
    ]
    for flow in flows:
        assert flow(ours) == flow(ref)


def _group(side: Any) -> Any:
    return celery.group if not isinstance(side, Celery) else group


def _chord(side: Any) -> Any:
    return celery.chord if not isinstance(side, Celery) else chord


#: What real Celery 5.7.0 gives with its worker (``celery -A refapp worker -c 2``, redis broker and
#: result backend at 127.0.0.1:6379), for the flows below; eager mode cannot show these. Reproduce
#: with tests/celery_worker_reference.py.
CELERY_WORKER: dict[str, Any] = {
    "group in a chord header": [2, 6, 4, 8],  # unrolled; its worker reverses the inner group (eager: in order)
    "group in a group": [2, 4, 6, 8],
    "chord in a group": [2, 10],
    "chord in a chord header": [2, 10],
    "chain in a chord header": [2, 40],
    "group of chains": [4, 12],
    "chain of chains": 70,
    "chain: group, then a task": 10,
    "chain: chord, then a task": 60,
    "chain ending in a group": [4, 6],
    "chunks": [[0, 2], [4, 6], [8]],
    "map": [3, 7],
    "starmap": [3, 7],
    "chord of chunks": [[0, 2], [4, 6]],
    "chord member fails: state": "FAILURE",
    "chord member fails: errback": "ChordError",  # with the callback's request; the message names the member
    "nested group member fails": "ValueError('boom 4')",
    "chord in a group fails": ["SUCCESS", "FAILURE"],  # group.get() raises the inner ChordError
    "chord in a chord header fails: get": "ChordError",
    "chord in a chord header fails: outer state": "PENDING",  # Celery never ends it; awa fails it
    "failed chain: states, last first": ["FAILURE", "FAILURE", "FAILURE", "SUCCESS"],
    "failed chain: last step name, args": ("canvas.mul", [2]),
    "failed chain: the chord after it": ["FAILURE", ["PENDING", "PENDING"]],  # its callback, its header
}


def _nested_flows(side: Any) -> dict[str, Callable[[], Any]]:
    """The nested canvases Celery has, built with ``side``'s own classes (Celery's or awa's)."""
    g, c, ch = (group, chord, chain) if isinstance(side, Celery) else (celery.group, celery.chord, celery.chain)
    add, mul, tsum, echo = (t(side, name) for name in ("add", "mul", "tsum", "echo"))
    return {
        "group in a chord header": lambda: c([add.s(1, 1), g(add.s(2, 2), add.s(3, 3)), add.s(4, 4)], echo.s())(),
        "group in a group": lambda: g(add.s(1, 1), g(add.s(2, 2), add.s(3, 3)), add.s(4, 4)).delay(),
        "chord in a group": lambda: g(add.s(1, 1), c([add.s(2, 2), add.s(3, 3)], tsum.s())).delay(),
        "chord in a chord header": lambda: c([add.s(1, 1), c([add.s(2, 2), add.s(3, 3)], tsum.s())], echo.s())(),
        "chain in a chord header": lambda: c([add.s(1, 1), add.s(2, 2) | mul.s(10)], echo.s())(),
        "group of chains": lambda: g(add.s(1, 1) | mul.s(2), add.s(2, 2) | mul.s(3)).delay(),
        "chain of chains": lambda: ch(add.s(1, 1) | mul.s(2), add.s(3) | mul.s(10)).delay(),
        "chain: group, then a task": lambda: (add.s(1, 1) | g(mul.s(2), mul.s(3)) | tsum.s()).delay(),
        "chain: chord, then a task": lambda: (c([add.s(1, 1), add.s(2, 2)], tsum.s()) | mul.s(10)).delay(),
        "chain ending in a group": lambda: (add.s(1, 1) | g(mul.s(2), mul.s(3))).delay(),
        "chunks": lambda: add.chunks(zip(range(5), range(5), strict=True), 2).delay(),
        "map": lambda: tsum.map([[1, 2], [3, 4]]).delay(),
        "starmap": lambda: add.starmap([(1, 2), (3, 4)]).delay(),
        "chord of chunks": lambda: c(add.chunks(zip(range(4), range(4), strict=True), 2).group(), echo.s())(),
    }


def _value(value: Any) -> Any:
    return value["args"][0] if isinstance(value, dict) else value  # echo: the list it was given


async def test_nested_canvases_give_celerys_values_on_the_worker(worker: Any, app: Celery, ref: Any) -> None:
    eager = {name: _value(flow().get()) for name, flow in _nested_flows(ref).items()}
    await worker()
    ours = {name: _value(await get(flow())) for name, flow in _nested_flows(app).items()}
    assert ours == eager
    differs = {"group in a chord header"}  # Celery's worker reverses the inner group's values; awa keeps order
    assert {k: v for k, v in ours.items() if k not in differs} == {
        k: v for k, v in CELERY_WORKER.items() if k in ours and k not in differs
    }
    assert sorted(ours["group in a chord header"]) == sorted(CELERY_WORKER["group in a chord header"])
    flat = group(t(app, "add").s(1, 1), group(t(app, "add").s(2, 2), t(app, "add").s(3, 3))).delay()
    assert len(flat.results) == 3 and all(isinstance(r, AsyncResult) for r in flat.results)  # unrolled, as Celery


def test_a_chain_ending_in_a_group_inside_a_chord_header_is_refused_before_writing(app: Celery) -> None:
    add = t(app, "add")
    with pytest.raises(UnsupportedOption, match="a chain ending in a group inside a chord's header"):
        chord([add.s(3, 3), add.s(1, 1) | group(add.s(1), add.s(2))], t(app, "tsum").s()).delay()
    with app.connection().cursor() as cur:
        cur.execute("SELECT (SELECT count(*) FROM awa.jobs), (SELECT count(*) FROM awa.celery_chords)")
        assert cur.fetchone() == (0, 0)


def test_every_step_a_canvas_writes_later_is_refused_at_the_call_before_anything_is_written(
    app: Celery, db_url: str
) -> None:
    """A step the worker enqueues later (a later chain step, a chord's callback or header members,
    a link) is checked by the call that starts the canvas: the error is the one the step raises when
    applied directly, nothing is written, and the caller's transaction goes on."""
    import psycopg

    from awa_bridge import ValidationError

    from .conftest import count_rows

    add, mul, tsum = t(app, "add"), t(app, "mul"), t(app, "tsum")
    with pytest.raises(ValidationError, match="priority: must be a Celery priority") as caught:
        (add.s(1, 1) | add.s(2).set(priority=42)).delay()
    assert caught.value.field == "priority"
    refused = {  # steps applying them directly refuses, each with a value, as the worker would
        "priority": add.s(2).set(priority=42),
        "queue": add.s(2).set(queue=""),
        "exchange": add.s(2).set(exchange="video"),
        "arguments": add.s(2, 3),  # with the value of the step before: three arguments for two
    }
    flows = {
        "chain": lambda step: add.s(1, 1) | step,
        "third step": lambda step: add.s(1, 1) | mul.s(2) | step,
        "chord header in a chain": lambda step: add.s(1, 1) | group(add.s(1), step) | tsum.s(),
        "chain ending in a group": lambda step: add.s(1, 1) | group(mul.s(2), step),
        "callback of a chord in a chain": lambda step: add.s(1, 1) | chord([mul.s(2)], step),
        "chord callback": lambda step: chord([add.s(1, 1), add.s(2, 2)], step),
        "chain in a chord header": lambda step: chord([add.s(3, 3), add.s(1, 1) | step], tsum.s()),
        "chain in a group": lambda step: group(add.s(3, 3), add.s(1, 1) | step),
        "link": lambda step: add.s(1, 1).set(link=step),
        "link of a later step": lambda step: add.s(1, 1) | mul.s(2).set(link=step),
    }
    with psycopg.connect(db_url) as conn, conn.transaction():
        conn.execute("INSERT INTO app_orders (note) VALUES ('mine')")
        for reason, step in refused.items():
            with pytest.raises(Exception) as direct:
                step.clone().apply_async((2,), connection=conn)
            for where, flow in flows.items():
                with pytest.raises(type(direct.value)) as caught:
                    flow(step.clone()).apply_async(connection=conn)
                assert str(caught.value) == str(direct.value), (reason, where)
        conn.execute("INSERT INTO app_orders (note) VALUES ('still usable')")
        assert conn.execute(
            "SELECT (SELECT count(*) FROM awa.jobs), (SELECT count(*) FROM awa.celery_chords)"
        ).fetchone() == (0, 0)
    assert count_rows(db_url) == 0
    assert count_rows(db_url, "SELECT count(*) FROM app_orders") == 2


def test_eager_mode_refuses_a_canvas_production_refuses_before_running_any_step(db_url: str) -> None:
    """With task_always_eager a canvas runs inline, but every step is checked first as the worker
    path checks it (``Signature._check``): a bad later step, member or callback fails the unit test
    with the error production raises, and no step runs, not even the first."""
    import functools

    from awa_bridge import ValidationError

    from .conftest import count_rows

    ours = Celery("eager_canvas_checks", set_as_current=False, database_url=db_url)
    runs: list[str] = []

    def recorded(fun: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fun)  # the task keeps the function's signature (Celery's typing check)
        def run(*args: Any) -> Any:
            runs.append(fun.__name__)
            return fun(*args)

        return run

    add, mul, tsum = (
        ours.task(name=f"canvas.{f.__name__}")(recorded(f)) for f in (canvas.add, canvas.mul, canvas.tsum)
    )
    flows: dict[str, Callable[[], Any]] = {
        "chain: later step's queue": lambda: chain(add.s(1, 1), mul.s(2).set(queue="")).apply_async(),
        "chain with |: third step's priority": lambda: (add.s(1, 1) | mul.s(2) | add.s(3).set(priority=42)).delay(),
        "chain: later step's arguments": lambda: chain(add.s(1, 1), add.s(2, 3)).apply_async(),
        "chain: later step's countdown": lambda: chain(add.s(1, 1), add.s(2).set(countdown="soon")).apply_async(),
        "chain: empty using": lambda: chain(add.s(1, 1), mul.s(2)).apply_async(using=""),
        "group: member's priority": lambda: group(add.s(1, 1), add.s(2, 2).set(priority=42)).apply_async(),
        "group: member's eta": lambda: group(add.s(1, 1), add.s(2, 2).set(eta="tomorrow")).delay(),
        "group: empty using": lambda: group(add.s(1, 1), add.s(2, 2)).apply_async(using=""),
        "chord: callback's queue": lambda: chord([add.s(1, 1), add.s(2, 2)], tsum.s().set(queue="")).apply_async(),
        "chord called with a bad body": lambda: chord([add.s(1, 1)])(tsum.s().set(exchange="x")),
        "chord: member's expires": lambda: chord([add.s(1, 1).set(expires="never")], tsum.s()).apply_async(),
        "chain: group then a bad step": lambda: (add.s(1, 1) | group(mul.s(2), mul.s(3)) | tsum.s(9)).delay(),
        "link of a later step": lambda: (add.s(1, 1) | mul.s(2).set(link=mul.s(2).set(queue=""))).delay(),
    }
    production = refused_alike_when_eager(ours, flows)
    assert isinstance(production["chain: later step's queue"], ValidationError)
    assert count_rows(db_url) == 0 and runs == [], "a refused canvas wrote a job or ran a step"
    # Accepted canvases still run inline, as Celery's eager mode runs them.
    assert (add.s(1, 1) | mul.s(5).set(queue="other", countdown=10)).delay().get() == 10
    assert chord([add.s(1, 1), add.s(2, 2)], tsum.s().set(priority=9)).apply_async().get() == 6
    assert runs == ["add", "mul", "add", "add", "tsum"]
    ours.close()


def route_by_customer(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
    """A router function naming the queue after the value: too long a name (over 200 characters)."""
    if name == "canvas.mul" and args:
        return {"queue": f"customer-{args[0]}-" * 30}
    return None


async def test_a_next_step_refused_in_the_worker_fails_the_step_before_once(
    worker: Any, app: Celery, db_url: str
) -> None:
    """What the call cannot check (a router function sees the real value only when the worker writes
    the step) refuses the next step in the worker: the step that returned fails once, saying why,
    instead of being retried (its task run again) to be refused again; the later step reads FAILURE."""
    from .conftest import count_rows

    app.conf.task_routes = [route_by_customer]
    try:
        await worker()
        result = (t(app, "add").s(1, 1) | t(app, "mul").s(3)).delay()
        first = AsyncResult(result.parent.id, app=app)
        await wait_until(lambda: first.state in (states.FAILURE, states.RETRY))
        assert first.state == states.FAILURE
        with pytest.raises(TaskError, match=r"what follows it could not be enqueued: task_routes: .*queue name"):
            await get(result)
        await wait_until(lambda: AsyncResult(result.id, app=app).state == states.FAILURE)
        sql = "SELECT attempt FROM awa.jobs WHERE state = 'failed' AND kind = 'canvas.add'"
        assert count_rows(db_url, sql) == 1  # its first attempt, not retried
    finally:
        app.conf.task_routes = None


async def test_a_members_error_comes_before_the_chord_error_even_when_written_after_it(
    worker: Any, app: Celery
) -> None:
    """The member fails the chord while its handler runs; its own failure is written a second
    later (``fail_slowly``), after the callback has already failed with ChordError. ``get()`` on
    the chord still raises the member's error, as Celery's does (Celery stores it first)."""
    await worker()
    result = chord([t(app, "add").s(1, 1), t(app, "fail_slowly").s(6)], t(app, "tsum").s()).delay()
    with pytest.raises(ValueError, match=r"boom 6"):
        await get(result)
    assert AsyncResult(result.id, app=app).state == states.FAILURE


async def test_errors_in_nested_members_propagate_as_celerys(worker: Any, app: Celery) -> None:
    await worker()
    add, fail, tsum = t(app, "add"), t(app, "fail"), t(app, "tsum")
    nested = chord([add.s(1, 1), group(add.s(1, 1), fail.s(4))], tsum.s()).delay()
    with pytest.raises(ValueError) as caught:
        await get(nested)
    assert repr(caught.value) == CELERY_WORKER["nested group member fails"]
    await wait_until(lambda: AsyncResult(nested.id, app=app).state == states.FAILURE)

    in_group = group(add.s(1, 1), chord([fail.s(5), add.s(1, 1)], tsum.s())).delay()
    with pytest.raises(ChordError, match=r"raised ValueError\('boom 5'\)"):
        await get(in_group)
    assert [r.state for r in in_group.results] == CELERY_WORKER["chord in a group fails"]

    in_header = chord([add.s(1, 1), chord([fail.s(7), add.s(1, 1)], tsum.s())], t(app, "echo").s()).delay()
    with pytest.raises(ChordError, match=r"raised ValueError\('boom 7'\)") as inner:
        await get(in_header)
    assert type(inner.value).__name__ == CELERY_WORKER["chord in a chord header fails: get"]
    # Celery leaves the outer callback PENDING for ever; awa fails it, naming the inner chord.
    with pytest.raises(ChordError) as outer:
        await get(AsyncResult(in_header.id, app=app))
    assert str(outer.value).startswith(f"Dependency {in_header.parent.results[1].id} raised ChordError(")


def test_two_apps_installed_on_one_client_share_the_builtin_kinds(db_url: str) -> None:
    from awa_bridge.celery.task import SHARED_TASKS

    shared = dict(SHARED_TASKS)  # @shared_task ones of modules other tests imported belong to every app
    SHARED_TASKS.clear()
    try:
        client = Client(db_url, **FAST)
        apps = [Celery(name, set_as_current=False, database_url=db_url) for name in ("one", "two")]
        for one in apps:
            one.task(name=f"{one.main}.add")(add)
            one.install(client)
    finally:
        SHARED_TASKS.update(shared)
    assert {"celery.map", "celery.starmap", "one.add", "two.add"} <= set(client.registry.handlers)
    assert "celery.map" not in apps[0].tasks  # built in, as Celery's, but not listed with the app's own


async def test_group_results_are_saved_and_restored_from_postgresql(worker: Any, app: Celery) -> None:
    # Celery 5.7 (its worker, redis backend): restore(id) gives the saved members in order, None
    # for an id never saved or deleted; app.GroupResult.restore(id) is the same on the app.
    from celery.result import GroupResult as CeleryGroupResult

    assert hasattr(CeleryGroupResult, "restore") and hasattr(CeleryGroupResult, "delete")
    await worker()
    saved = group(t(app, "add").s(i, i) for i in range(3)).delay()
    assert saved.save() is saved
    back = GroupResult.restore(saved.id, app=app)
    assert back is not None and back.id == saved.id
    assert [r.id for r in back.results] == [r.id for r in saved.results]
    assert await get(back) == [0, 2, 4]
    on_app = app.GroupResult.restore(saved.id)
    assert on_app is not None and await get(on_app) == [0, 2, 4]
    assert app.GroupResult.restore("never-saved") is None
    saved.delete()
    assert app.GroupResult.restore(saved.id) is None
    nested = GroupResult("outer", [AsyncResult("a", app=app), GroupResult("inner", [AsyncResult("b", app=app)])])
    nested._app = app
    nested.save()
    again = app.GroupResult.restore("outer")
    assert again is not None and again.results[1].id == "inner" and again.results[1].results[0].id == "b"
    with app.connection().cursor() as cur:  # one completed row per saved group, found by its id
        cur.execute(
            "SELECT kind, state::text FROM awa.jobs WHERE metadata -> 'celery' ->> 'id' LIKE 'celery-taskset%%'"
        )
        assert cur.fetchall() == [("celery.group", "completed")]


# -- update_state, time limits, rate limits ----------------------------------------------------------------


async def test_update_state_shows_a_custom_state_and_info_while_running(worker: Any, app: Celery) -> None:
    canvas.progress_gate.clear()
    await worker()
    result = t(app, "progress").delay(3)
    first = await wait_until(lambda: (r := AsyncResult(result.id, app=app)).state == "PROGRESS" and r.info)
    assert first["total"] == 3  # each update is written at once, so any of the three may be read first
    await wait_until(lambda: AsyncResult(result.id, app=app).info == {"current": 3, "total": 3})
    assert AsyncResult(result.id, app=app).state == "PROGRESS" and not result.ready()
    canvas.progress_gate.set()
    assert await get(result) == "done"
    assert AsyncResult(result.id, app=app).state == states.SUCCESS


async def test_soft_time_limit_raises_inside_the_task_and_time_limit_fails_it(
    worker: Any, app: Celery, ref: Any
) -> None:
    # Celery's eager mode applies no time limits (they belong to its pool); its worker raises
    # SoftTimeLimitExceeded in the task and fails it with TimeLimitExceeded, as awa's does.
    await worker()
    soft = t(app, "soft_limited").apply_async(soft_time_limit=0.2)
    assert await get(soft) == "cleaned up"
    hard = t(app, "hard_limited").apply_async(time_limit=0.2)
    from awa_bridge.celery import TimeLimitExceeded

    with pytest.raises(TimeLimitExceeded):
        await get(hard)


async def test_rate_limit_spreads_runs_without_spending_attempts(worker: Any, app: Celery, db_url: str) -> None:
    limited = Celery("limited", database_url=db_url, set_as_current=False)
    runs: list[float] = []

    @limited.task(name="limited.tick", rate_limit="10/s")
    def tick() -> None:
        import time

        runs.append(time.monotonic())

    client = Client(db_url, **FAST)
    limited.install(client)
    await client.start(["default"])
    try:
        results = [tick.delay() for _ in range(15)]
        await wait_until(lambda: all(r.state == states.SUCCESS for r in results), timeout=20)
    finally:
        await client.shutdown(timeout=2)
        limited.close()
    assert len(runs) == 15
    assert runs[-1] - runs[0] >= 0.4  # 10 at once (one second's bucket), the other 5 at 10/s
    assert all(r.retries == 0 for r in results)


# -- signals, logging --------------------------------------------------------------------------------------


def _record_signals(module: Any, log: list[tuple[str, tuple[str, ...]]]) -> list[Any]:
    receivers = []
    for name in ("task_prerun", "task_postrun", "task_success", "task_failure", "task_retry"):

        def receiver(sender: Any = None, _name: str = name, **kwargs: Any) -> None:
            log.append((_name, tuple(sorted(k for k in kwargs if k != "signal"))))

        getattr(module, name).connect(receiver)
        receivers.append((getattr(module, name), receiver))
    return receivers


async def test_task_signals_fire_with_celerys_arguments(worker: Any, app: Celery, ref: Any) -> None:
    from celery import signals as celery_signals

    theirs: list[tuple[str, tuple[str, ...]]] = []
    ours: list[tuple[str, tuple[str, ...]]] = []
    connected = _record_signals(celery_signals, theirs)
    t(ref, "add").delay(1, 2)
    t(ref, "fail").delay(1)
    for sig, receiver in connected:
        sig.disconnect(receiver)
    connected = _record_signals(signals, ours)
    try:
        await worker()
        await get(t(app, "add").delay(1, 2))
        with pytest.raises(ValueError):
            await get(t(app, "fail").delay(1))
        await wait_until(lambda: len(ours) >= len(theirs))
    finally:
        for sig, receiver in connected:
            sig.disconnect(receiver)
    assert [name for name, _ in theirs] == [
        *("task_prerun", "task_success", "task_postrun"),
        *("task_prerun", "task_failure", "task_postrun"),
    ]
    assert ours == theirs  # same signals, same order, same argument names


async def test_worker_ready_and_shutdown_signals(app: Celery, db_url: str) -> None:
    seen: list[str] = []

    def ready(sender: Any = None, **kwargs: Any) -> None:
        seen.append("ready")

    def shutdown(sender: Any = None, **kwargs: Any) -> None:
        seen.append("shutdown")

    signals.worker_ready.connect(ready)
    signals.worker_shutdown.connect(shutdown)
    try:
        client = Client(db_url, **FAST)
        app.install(client)
        await client.start(["default"])
        assert seen == ["ready"]
        await client.shutdown(timeout=2)
        assert seen == ["ready", "shutdown"]
    finally:
        signals.worker_ready.disconnect(ready)
        signals.worker_shutdown.disconnect(shutdown)


async def test_get_task_logger_records_carry_the_task(
    worker: Any, app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    from awa_bridge.celery.utils.log import get_task_logger

    logger = get_task_logger("canvas.logging")
    assert logger.parent is logging.getLogger("celery.task")
    logged = Celery("logged", database_url=app.conf.database_url, set_as_current=False)

    @logged.task(name="logged.say")
    def say() -> None:
        logger.warning("hello from the task")

    client = Client(app.conf.database_url, **FAST)
    logged.install(client)
    await client.start(["default"])
    try:
        with caplog.at_level(logging.WARNING, logger="canvas.logging"):
            result = say.delay()
            await get(result)
    finally:
        await client.shutdown(timeout=2)
        logged.close()
    record = next(r for r in caplog.records if r.getMessage() == "hello from the task")
    assert record.task_name == "logged.say" and record.task_id == result.id  # type: ignore[attr-defined]


# -- kombu's JSON -------------------------------------------------------------------------------------------


async def test_datetimes_uuids_and_decimals_round_trip_as_through_kombu(worker: Any, app: Celery, ref: Any) -> None:
    values = (datetime(2026, 1, 2, 3, 4, 5), date(2026, 1, 2), UUID(int=7), Decimal("1.10"))
    theirs = t(ref, "echo").delay(*values, at=datetime(2026, 1, 2)).get()
    their_kinds = t(ref, "kinds").delay().get()
    await worker()
    echoed = t(app, "echo").delay(*values, at=datetime(2026, 1, 2))
    ours = await get(echoed)
    assert AsyncResult(echoed.id, app=app).args == list(values)  # as stored, read back
    assert (
        ours
        == theirs
        == {
            "args": list(values),
            "kwargs": {"at": datetime(2026, 1, 2)},
            "types": ["datetime", "date", "UUID", "Decimal"],
        }
    )
    assert await get(t(app, "kinds").delay()) == their_kinds
    # Stored the way kombu writes a message body.
    row = AsyncResult(t(app, "kinds").delay().id, app=app)
    await get(row)
    assert row._row is not None and row._row["result"]["price"] == {"__type__": "decimal", "__value__": "19.99"}


# -- eager mode is the worker's attempt --------------------------------------------------------------------------


def test_eager_mode_maps_every_awa_outcome_as_the_worker_does() -> None:
    from awa_bridge.worker import Cancel, RetryAfter, Snooze

    eager = Celery("eager_outcomes", set_as_current=False, task_always_eager=True)
    runs: list[str] = []

    @eager.task(bind=True, max_retries=2)
    def snoozes(self: Any) -> int:
        runs.append("snooze")
        if len(runs) < 3:
            raise Snooze(60)  # run again later without spending an attempt
        return self.request.retries

    @eager.task
    def retries_after() -> str:
        runs.append("retry_after")
        if runs.count("retry_after") < 2:
            raise RetryAfter(60)
        return "second attempt"

    @eager.task
    def cancels() -> None:
        raise Cancel("not wanted")

    result = snoozes.delay()
    assert result.state == states.SUCCESS and result.get() == 0 and runs.count("snooze") == 3
    assert retries_after.delay().get() == "second attempt"
    cancelled = cancels.delay()
    assert cancelled.state == states.REVOKED


# -- retry counting: a lost worker is not a retry -------------------------------------------------------------


def test_a_task_killed_with_its_worker_runs_again_without_spending_max_retries(db_url: str, tmp_path: Any) -> None:
    import subprocess
    import sys
    import time

    from .procs import REPO_ROOT

    canvas.app.conf.database_url = db_url
    result = t(canvas.app, "once_only").delay()
    marker = tmp_path / "died"
    env = {"DATABASE_URL": db_url, "AWA_TEST_MARKER": str(marker), "PYTHONUNBUFFERED": "1"}
    import os

    command = [sys.executable, "-m", "awa_bridge", "worker", "tests.celery_canvas_app:client", "--queue", "default"]
    first = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    assert first.wait(60) == 1 and marker.exists()  # died in the middle of the task (max_retries=0)
    second = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while AsyncResult(result.id, app=canvas.app).state != states.SUCCESS:
            assert time.monotonic() < deadline, "the task was not run again after its worker died"
            time.sleep(0.1)
    finally:
        second.terminate()
        second.wait(20)
        canvas.app.close()
    again = AsyncResult(result.id, app=canvas.app)
    assert again.get(timeout=1) == "ran again" and again.retries == 0


# -- exactly once, whenever a worker dies ------------------------------------------------------------------------


@pytest.mark.slow
def test_chord_callbacks_and_chain_steps_are_enqueued_exactly_once_with_workers_killed(db_url: str) -> None:
    """Worker subprocesses are SIGKILLed at random instants while chords and chains run: every
    callback and every chain step is enqueued exactly once, with the right values."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    from .procs import REPO_ROOT, wait_for

    app = canvas.app
    app.conf.database_url = db_url
    add_ = t(app, "slow_add")
    chords = [chord(add_.s(i, k) for i in range(4))(t(app, "tsum").s()) for k in range(30)]
    chains = [(add_.s(k, 1) | add_.s(1) | add_.s(1)).delay() for k in range(20)]
    tsum_ = t(app, "tsum")
    # Nested: a chord and a group inside a chord's header, a chord inside a group.
    nested = [
        chord([add_.s(1, k), chord([add_.s(i, k) for i in range(3)], tsum_.s()), group(add_.s(2, k), add_.s(3, k))])(
            tsum_.s()
        )
        for k in range(10)
    ]
    in_groups = [group(add_.s(k, 1), chord([add_.s(k, 2), add_.s(k, 3)], tsum_.s())).delay() for k in range(10)]
    env = {**os.environ, "DATABASE_URL": db_url, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "awa_bridge", "worker", "tests.celery_canvas_app:client", "--queue", "default:4"]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    procs = [start(), start()]
    rng = random.Random(13)

    def running() -> int:
        with app.connection().cursor() as cur:
            cur.execute("SELECT count(*) FROM awa.jobs WHERE state = 'running'")
            (count,) = cur.fetchone()
        return int(count)

    def done() -> bool:
        last = [*chords, *chains, *nested, *(g.results[1] for g in in_groups)]
        return all(r.state == states.SUCCESS for r in last)

    try:
        kills = 0
        while kills < 8 and not done():
            # Kill at a random instant while attempts run (a worker still starting up has none).
            wait_for(lambda: done() or running() > 0, 60, "a worker to be running a job")
            time.sleep(rng.uniform(0.0, 0.2))
            victim = procs.pop(rng.randrange(len(procs)))
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            kills += 1
            procs.append(start())
        wait_for(done, 90, "every chord callback and chain to succeed")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)
    assert kills >= 1
    assert [r.get(timeout=1) for r in chords] == [sum(i + k for i in range(4)) for k in range(30)]
    assert [r.get(timeout=1) for r in chains] == [k + 3 for k in range(20)]
    assert [r.get(timeout=1) for r in nested] == [(1 + k) + (3 + 3 * k) + (2 + k) + (3 + k) for k in range(10)]
    assert [g.get(timeout=1) for g in in_groups] == [[k + 1, 2 * k + 5] for k in range(10)]
    with app.connection().cursor() as cur:
        task_ids = [r.id for r in chords] + [r.id for r in chains] + [r.parent.id for r in chains]
        task_ids += [r.id for r in nested] + [r.parent.results[1].id for r in nested]
        task_ids += [g.results[1].id for g in in_groups]
        cur.execute(
            "SELECT metadata -> 'celery' ->> 'id', count(*) FROM awa.jobs "
            "WHERE metadata ? 'celery' AND metadata -> 'celery' ->> 'id' = ANY(%s) GROUP BY 1",
            (task_ids,),
        )
        counts = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM awa.celery_chords")
        (pending,) = cur.fetchone()
        cur.execute("SELECT count(*) FROM awa.jobs WHERE array_to_string(errors, ' ') LIKE '%%HeartbeatStale%%'")
        (rescued,) = cur.fetchone()
    assert rescued > 0, "no kill landed in the middle of an attempt; the test proved nothing"
    assert counts == dict.fromkeys(task_ids, 1)  # one job per callback and per chain step, never two
    assert pending == 0
    app.close()


# -- settings: a production Celery config moves as it is ----------------------------------------------------

#: cookiecutter-django's Celery block (config/settings/base.py, local.py, production.py).
COOKIECUTTER_DJANGO = {
    "CELERY_TIMEZONE": "UTC",
    "CELERY_BROKER_URL": "redis://redis:6379/0",
    "CELERY_RESULT_BACKEND": "redis://redis:6379/0",
    "CELERY_RESULT_EXTENDED": True,
    "CELERY_RESULT_BACKEND_ALWAYS_RETRY": True,
    "CELERY_RESULT_BACKEND_MAX_RETRIES": 10,
    "CELERY_ACCEPT_CONTENT": ["json"],
    "CELERY_TASK_SERIALIZER": "json",
    "CELERY_RESULT_SERIALIZER": "json",
    "CELERY_TASK_TIME_LIMIT": 5 * 60,
    "CELERY_TASK_SOFT_TIME_LIMIT": 60,
    "CELERY_WORKER_SEND_TASK_EVENTS": True,
    "CELERY_TASK_SEND_SENT_EVENT": True,
    "CELERY_WORKER_HIJACK_ROOT_LOGGER": False,
    "CELERY_TASK_EAGER_PROPAGATES": True,
    "CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP": True,
    "CELERY_BROKER_USE_SSL": {"ssl_cert_reqs": "required"},
    "CELERY_REDIS_BACKEND_USE_SSL": {"ssl_cert_reqs": "required"},
}

#: Celery's "first steps" and "next steps" guides, and the worker settings projects tune.
CELERY_GUIDES = {
    "broker_url": "pyamqp://guest@localhost//",
    "result_backend": "rpc://",
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ["json"],
    "timezone": "Europe/Oslo",
    "enable_utc": True,
    "task_routes": {"canvas.add": "low-priority"},
    "task_annotations": {"canvas.add": {"rate_limit": "10/m"}},
    "result_expires": 3600,
    "include": ["tests.celery_canvas_app"],
    "worker_concurrency": 8,
    "worker_prefetch_multiplier": 1,
    "worker_max_tasks_per_child": 100,
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "task_queues": ("default", "low-priority"),
    "task_default_rate_limit": "100/s",
}


def test_a_production_celery_config_is_accepted_and_honoured() -> None:
    # Real Celery takes both blocks as they are; so does awa (only the settings whose meaning
    # cannot be kept are refused, see the next test).
    celery.Celery("ref", set_as_current=False).config_from_object(COOKIECUTTER_DJANGO, namespace="CELERY")
    ours = Celery("prod", set_as_current=False, database_url="postgresql://db/app")
    ours.config_from_object(COOKIECUTTER_DJANGO, namespace="CELERY")
    ours.conf.update(CELERY_GUIDES)
    assert ours.conf.task_time_limit == 300 and ours.conf.task_soft_time_limit == 60
    add_task = ours.task(name="canvas.add")(add)
    assert ours.tasks["canvas.add"].rate_limit == "10/m"  # task_annotations
    assert ours.route("canvas.add") == {"queue": "low-priority"}
    configs = {c.name: c for c in ours.queue_configs()}
    assert configs["low-priority"].max_workers == 8  # worker_concurrency
    assert configs["low-priority"].deadline >= 300  # the queue deadline is the hard limit's backstop
    assert add_task.max_attempts > add_task.max_retries + 1


def test_settings_whose_meaning_cannot_be_kept_are_refused_together_and_none_is_set() -> None:
    ours = Celery("prod", set_as_current=False)
    bad = {
        **COOKIECUTTER_DJANGO,
        "CELERY_BEAT_SCHEDULER": "django_celery_beat.schedulers:DatabaseScheduler",
        "CELERY_TASK_ACKS_LATE": False,
        "CELERY_TASK_SERIALIZER": "pickle",
        "CELERY_TASK_ALWAYS_EAGRE": True,
    }
    with pytest.raises(UnsupportedOption) as caught:
        ours.config_from_object(bad, namespace="CELERY")
    message = str(caught.value)
    assert "4 settings are refused" in message
    for key in ("beat_scheduler", "task_acks_late", "task_serializer", "task_always_eagre"):
        assert key in caught.value.field and f"{key}:" in message
    assert ours.conf.task_time_limit is None and ours.conf.timezone is None  # nothing was set


# -- app.Task, app.control.inspect() ------------------------------------------------------------------------


async def test_inspect_answers_from_the_database(worker: Any, app: Celery) -> None:
    assert issubclass(app.Task, canvas.app.task_cls)
    canvas.progress_gate.clear()
    later = t(app, "add").apply_async((1, 2), countdown=600)
    running = t(app, "progress").delay(1)
    inspect = app.control.inspect()
    ((node, registered),) = inspect.registered().items()
    assert "canvas.add" in registered and node.startswith("awa@")
    assert [r["id"] for r in next(iter(inspect.reserved().values()))] == [running.id]
    await worker()
    await wait_until(lambda: AsyncResult(running.id, app=app).state == "PROGRESS")
    active = next(iter(inspect.active().values()))
    assert [(r["id"], r["name"], r["args"]) for r in active] == [(running.id, "canvas.progress", [1])]
    scheduled = next(iter(inspect.scheduled().values()))
    assert [s["request"]["id"] for s in scheduled] == [later.id] and scheduled[0]["eta"]
    canvas.progress_gate.set()
    assert await get(running) == "done"


async def test_a_chord_member_lost_on_its_last_attempt_fails_the_chord(worker: Any, app: Celery, db_url: str) -> None:
    """No code of the task runs when the leader fails its last attempt (its worker died): the
    rescue tells the chord, so the callback fails with ChordError instead of never running."""
    import os
    import subprocess
    import sys

    import psycopg

    from .procs import REPO_ROOT

    result = chord([t(app, "add").s(1, 1), t(app, "dies").s()], t(app, "tsum").s()).delay()
    member = result.parent.results[1]
    with psycopg.connect(db_url, autocommit=True) as conn:  # fault injection: the last attempt is the first
        conn.execute("UPDATE awa.jobs SET max_attempts = 1 WHERE id = %s", (member.job_id,))
    command = [sys.executable, "-m", "awa_bridge", "worker", "tests.celery_canvas_app:client", "--queue", "default"]
    env = {**os.environ, "DATABASE_URL": db_url, "AWA_TEST_DIE": "1"}
    doomed = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert await asyncio.to_thread(doomed.wait, 60) == 1  # it died in the middle of the member
    await worker()  # its leader rescues the member: failed, no attempt left
    with pytest.raises(TaskError, match="heartbeat stale"):  # the member's own error first, as Celery's get
        await get(result)
    with pytest.raises(ChordError, match=r"raised WorkerLostError\('heartbeat stale"):
        await get(AsyncResult(result.id, app=app))
    assert member.state == states.FAILURE


def route_by_size(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> Any:
    """A Celery router function: big additions go to their own queue."""
    if name == "canvas.add" and args and args[0] > 100:
        return {"queue": "big", "exchange": "big", "routing_key": "big"}
    return None


def test_router_functions_globs_and_regexes_route_as_celerys(app: Celery, ref: Any) -> None:
    import re

    routes = [route_by_size, {re.compile(r"canvas\.m.*"): {"queue": "m"}}, {"canvas.*": "rest"}]
    ref.conf.task_routes = routes
    theirs = [
        ref.amqp.router.route({}, name, args)["queue"].name
        for name, args in (("canvas.add", (1000, 1)), ("canvas.add", (1, 1)), ("canvas.mul", (1, 1)))
    ]
    ours = Celery("routed", set_as_current=False, database_url=app.conf.database_url)
    ours.conf.task_routes = routes
    for fun in (add, mul):
        ours.task(name=f"canvas.{fun.__name__}")(fun)
    calls = [(add, (1000, 1)), (add, (1, 1)), (mul, (1, 1))]
    queues = [ours.route(f"canvas.{fun.__name__}", args)["queue"] for fun, args in calls]
    assert queues == theirs == ["big", "rest", "m"]
    job = ours.tasks["canvas.add"].delay(1000, 1)
    with ours.connection().cursor() as cur:
        cur.execute("SELECT queue FROM awa.jobs WHERE id = %s", (job.job_id,))
        assert cur.fetchone() == ("big",)
    ours.conf.task_routes = [lambda name, *a, **k: {"exchange": "video", "routing_key": "video.compress"}]
    with pytest.raises(UnsupportedOption, match="awa routes by queue only"):
        ours.tasks["canvas.add"].delay(1, 1)
    ours.close()


def test_time_limits_land_inside_the_task_never_after_it() -> None:
    """Limits due just as tasks end, in four threads at once: each lands inside its task's block
    (or not at all), never in the code that runs after it (the worker's own)."""
    import threading
    import time

    from awa_bridge.celery import SoftTimeLimitExceeded, TimeLimitExceeded
    from awa_bridge.celery.limits import TimeLimits

    hits, escaped = [], []

    def task(i: int) -> None:
        end = time.monotonic() + 0.001 * (i % 7)
        while time.monotonic() < end:
            pass

    def run() -> None:
        for i in range(150):
            try:
                try:
                    # The task is a function of its own, as in the worker (limited_call calls it): on
                    # CPython 3.13 an exception injected into a loop can skip the try/except of the
                    # frame it lands in (python/cpython#139622), and is caught by its caller's.
                    with TimeLimits(0.002 + (i % 5) * 0.001, 0.004):
                        task(i)
                except (SoftTimeLimitExceeded, TimeLimitExceeded):
                    hits.append(i)
                total = 0
                for step in range(5000):  # after the task: no limit may arrive here
                    total += step
            except (SoftTimeLimitExceeded, TimeLimitExceeded) as exc:
                escaped.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert hits, "no limit fired: the test proved nothing"
    assert escaped == []


# -- the worker piece canvas stands on: job.on_complete ------------------------------------------------------


async def test_on_complete_effects_commit_exactly_with_the_completion(db_url: str) -> None:
    """What canvas uses: an effect registered by a plain (not transactional) handler runs in the
    short transaction that completes the job; an attempt ending otherwise never runs it, and an
    effect that fails rolls the completion back (the job is retried)."""
    import psycopg

    from awa_bridge import insert_job_sync
    from awa_bridge.worker import Client

    from .conftest import count_rows
    from .waiting import job_state

    def note(text: str) -> Any:
        return lambda conn: conn.execute("INSERT INTO app_orders (note) VALUES (%s)", (text,))

    client = Client(db_url, **FAST)

    @client.task("effects.ok")
    def ok(job: Any) -> None:
        job.on_complete(note("ok"))

    @client.task("effects.raises")
    def raises(job: Any) -> None:
        job.on_complete(note("never"))
        raise ValueError("the handler failed")

    @client.task("effects.bad_effect")
    def bad_effect(job: Any) -> None:
        def effect(conn: Any) -> None:
            conn.execute("INSERT INTO app_orders (note) VALUES ('half')")
            raise RuntimeError("the effect failed")

        job.on_complete(effect)

    with psycopg.connect(db_url, autocommit=True) as conn:
        jobs = [insert_job_sync(conn, {}, kind=kind, max_attempts=1) for kind in ("effects.ok", "effects.raises")]
        jobs.append(insert_job_sync(conn, {}, kind="effects.bad_effect", max_attempts=2))
    await client.start(["default"])
    try:
        await wait_until(lambda: job_state(db_url, jobs[0].id) == "completed")
        await wait_until(lambda: job_state(db_url, jobs[1].id) == "failed")
        await wait_until(lambda: job_state(db_url, jobs[2].id) == "failed")  # retried once, then out of attempts
    finally:
        await client.shutdown(timeout=2)
    with psycopg.connect(db_url, autocommit=True) as conn:
        notes = [row[0] for row in conn.execute("SELECT note FROM app_orders ORDER BY id")]
    assert notes == ["ok"]
    assert count_rows(db_url, "SELECT count(*) FROM awa.jobs WHERE state = 'completed'") == 1
