"""The handlers of examples/receipts_lab.py, run by a real worker process.

    DATABASE_URL=... RECEIPTS_LAB_SCHEMA=receipts_lab \\
        python -m awa_bridge worker receipts_lab_worker:client --queue NAME

(the lab starts it with ``examples/`` on ``PYTHONPATH``). Each handler writes
its business effect — a refund row in ``<schema>.effects`` — in the
application's OWN transaction, separate from the job's acknowledgement, and
logs what it does to ``<schema>.trace`` on an autocommit connection, so every
line that was written survives a SIGKILL.

- ``lab_refund``: commit the effect, then return (the worker acknowledges).
- ``lab_refund_with_receipt``: the same, with a receipt recorded in the
  effect's transaction; a repeat finds it and reuses the outcome.
- ``lab_refund_ack_first``: acknowledge first (return at once) and leave the
  effect to an in-memory queue that runs it later.

With ``stop_in_crash_window`` in the args, the first attempt stops after the
effect has committed and before the job is acknowledged, and waits there to
be killed: the crash window.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

from awa_bridge.receipts import receipt
from awa_bridge.worker import Client

DATABASE_URL = os.environ["DATABASE_URL"]
SCHEMA = os.environ.get("RECEIPTS_LAB_SCHEMA", "receipts_lab")
DEFERRED_EFFECT_DELAY = float(os.environ.get("RECEIPTS_LAB_DEFER_SECONDS", "30"))
TENANT = "acme"

# Short timings so the lab runs in seconds: heartbeat every 0.1 s, a job
# whose heartbeat is 0.5 s old is presumed dead, rescue looks every 0.2 s.
client = Client(
    DATABASE_URL,
    heartbeat_interval=0.1,
    heartbeat_staleness=0.5,
    rescue_interval=0.2,
    promote_interval=0.05,
    leader_election_interval=0.2,
    drain_timeout=2.0,
)


def trace(job: Any, event: str, detail: str = "") -> None:
    with psycopg.connect(DATABASE_URL, autocommit=True, application_name="receipts-lab-trace") as conn:
        conn.execute(
            f"INSERT INTO {SCHEMA}.trace (case_name, job_id, attempt, run_lease, pid, event, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (job.args["case"], job.id, job.attempt, job.run_lease, os.getpid(), event, detail),
        )


def save_refund(conn: psycopg.Connection[Any], job: Any) -> int:
    """The business effect: one refund row (think: money sent to a customer)."""
    return conn.execute(
        f"INSERT INTO {SCHEMA}.effects (case_name, job_id, attempt, order_id, amount_cents) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (job.args["case"], job.id, job.attempt, job.args["order"], job.args["amount_cents"]),
    ).fetchone()[0]


def crash_window(job: Any) -> None:
    """On the first attempt of a job that asks for it, stop here until the process is killed."""
    if job.args.get("stop_in_crash_window") and job.attempt == 1:
        trace(job, "in the crash window", "effect committed, job not acknowledged yet; waiting to be killed")
        while True:
            time.sleep(1)


def delivered(job: Any) -> None:
    trace(job, "delivered", f"run_lease {job.run_lease}, worker pid {os.getpid()}")


@client.task("lab_refund")
def refund(job: Any) -> None:
    delivered(job)
    with psycopg.connect(DATABASE_URL) as conn:
        effect_id = save_refund(conn, job)
        conn.commit()
    trace(job, "effect committed", f"refund #{effect_id} for order {job.args['order']}")
    crash_window(job)
    trace(job, "returning", "the worker acknowledges the job (completed)")


@client.task("lab_refund_with_receipt")
def refund_with_receipt(job: Any) -> None:
    delivered(job)
    payload = {"order": job.args["order"], "amount_cents": job.args["amount_cents"]}
    key = f"refund:{job.args['order']}"
    with psycopg.connect(DATABASE_URL) as conn:
        with receipt(conn, TENANT, key, payload) as r:
            if r.recorded:
                reused = r.outcome
            else:
                reused = None
                r.save({"refund_id": save_refund(conn, job)})
        conn.commit()
    if reused is not None:
        trace(job, "receipt found", f"{TENANT}/{key} already recorded {reused}: outcome reused, no new refund")
    else:
        trace(job, "effect committed", f"refund #{r.outcome['refund_id']} + receipt {TENANT}/{key}, one transaction")
    crash_window(job)
    trace(job, "returning", "the worker acknowledges the job (completed)")


@client.task("lab_refund_ack_first")
def refund_ack_first(job: Any) -> None:
    delivered(job)

    def later() -> None:
        time.sleep(DEFERRED_EFFECT_DELAY)
        with psycopg.connect(DATABASE_URL) as conn:
            effect_id = save_refund(conn, job)
            conn.commit()
        trace(job, "effect committed", f"refund #{effect_id}, {DEFERRED_EFFECT_DELAY:.0f} s after the ack")

    threading.Thread(target=later, name="deferred-effect", daemon=True).start()
    trace(job, "acknowledged first", "returning now; the refund waits in an in-memory queue of this process")
