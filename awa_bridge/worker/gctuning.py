"""The garbage collector of a process that is a worker.

A worker allocates a dozen small container objects per job (its context, the
attempt's coroutines and task, the row) and keeps few of them: CPython's
cyclic collector, with its default young-generation threshold of 700
allocations, then runs a young collection every few dozen jobs and a full one
(which walks every object the application holds) every few thousand. In a
drain of no-op jobs that was about a fifth of the worker's CPU.

``tune_gc`` is what a process that runs as a worker does once it has loaded
the application: one full collection, ``gc.freeze()`` (everything alive now,
the application's modules and settings, is left out of later collections),
and a young-generation threshold of ``YOUNG_THRESHOLD`` allocations. Reference
counting still frees almost everything at once; the collector only finds
cycles, a little later. ``Client.run()`` (``python -m awa_bridge worker``,
``manage.py awa_worker``) calls it; a process that embeds a worker with
``Client.start()`` on a loop of its own may call it too.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def tune_gc() -> None:
    """Collect, freeze what is alive, and raise the young generation's threshold (never lower it)."""
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), *older)
