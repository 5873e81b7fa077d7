"""The handlers of examples/receipts_lab.py, run by a real worker process.

    DATABASE_URL=... RECEIPTS_LAB_SCHEMA=receipts_lab RECEIPTS_LAB_PROVIDER=http://127.0.0.1:PORT \\
        python -m awa_bridge worker receipts_lab_worker:client --queue NAME

(the lab starts it with ``examples/`` on ``PYTHONPATH``). Every handler logs
what it does to ``<schema>.trace`` on an autocommit connection, so every line
that was written survives a SIGKILL. With ``stop_in_crash_window`` in the
args, the FIRST attempt stops at its case's crash instant and waits there to
be killed.

Effects outside the database: a receipt email sent through the lab's mail
provider (``receipts_lab_provider.py``, a separate process on loopback).

- ``lab_email_naive``: send, no idempotency key; crash instant: after the send.
- ``lab_email_keyed``: send with a stable idempotency key (the operation
  key), no receipt; crash instant: after the send.
- ``lab_email_receipt``: ``external_effect`` (claim committed, send with the
  key, outcome recorded with the business effect, marking the order as
  emailed); crash instant: after the send, before the outcome is saved.
  ``provider`` in the args says which account (idempotent or plain) and is
  what the handler declares with ``idempotent=``. An unknown outcome on a
  plain provider parks the job (``park_for_reconciliation``); a conflict
  fails it (``TerminalError``): reusing a key for other work is a bug.
- ``lab_email_ack_first``: return at once, send later from memory.

Effects in the database (a refund row in ``<schema>.effects``):

- ``lab_refund``: commit the effect in the application's own transaction,
  then return; crash instant: after the commit, before the acknowledgement.
- ``lab_refund_with_receipt``: the same with a receipt in that transaction.
- ``lab_refund_ack_first``: acknowledge first, leave the effect in memory.
- ``lab_refund_transactional``: ``transactional=True``: the refund is
  written on ``job.conn``, in the transaction that also completes the job;
  crash instant: after the write, before that transaction commits.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg

from awa_bridge.errors import OutcomeUnknown, ReceiptConflict
from awa_bridge.receipts import external_effect, idempotency_key, park_for_reconciliation, receipt
from awa_bridge.worker import Client, TerminalError

DATABASE_URL = os.environ["DATABASE_URL"]
SCHEMA = os.environ.get("RECEIPTS_LAB_SCHEMA", "receipts_lab")
PROVIDER = os.environ.get("RECEIPTS_LAB_PROVIDER", "http://127.0.0.1:1")
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


def started(job: Any) -> None:
    trace(job, "handler started", f"run_lease {job.run_lease}, worker pid {os.getpid()}")


def crash_window(job: Any, where: str) -> None:
    """On the first attempt of a job that asks for it, stop here until the process is killed."""
    if job.args.get("stop_in_crash_window") and job.attempt == 1:
        trace(job, "in the crash window", f"{where}; waiting to be killed")
        while True:
            time.sleep(1)


# -- the external effect: a receipt email ------------------------------------------------------


class ProviderRefused(Exception):
    """The provider answered with an error status (a definite answer, not an unknown outcome)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__(f"provider answered {status}: {body.get('error')}: {body.get('message', '')}")


def order_email(order: str) -> dict[str, Any]:
    """The email's payload, built from the order as it is NOW (an edited order changes it)."""
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        row = conn.execute(f"SELECT email, amount_cents FROM {SCHEMA}.orders WHERE order_id = %s", (order,)).fetchone()
    if row is None:
        raise LookupError(f"no order {order!r}")
    email, amount = row
    return {"to": email, "subject": f"Your receipt for {order}", "amount_cents": amount}


def post_email(job: Any, account: str, message: dict[str, Any], key: str | None) -> dict[str, Any]:
    """POST to the lab provider; the answer as a dict, ``ProviderRefused`` on an error status."""
    headers = {"Content-Type": "application/json", "X-Lab-Case": job.args["case"]}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(
        f"{PROVIDER}/{account}/v1/messages", data=json.dumps(message).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            raise ProviderRefused(error.code, json.loads(error.read() or b"{}")) from None
    how = "replayed the original answer" if answer.get("replayed") else "delivered"
    trace(job, "provider answered", f"{answer['message_id']} {how} (key {key or 'none'})")
    return answer


def operation_key(job: Any) -> str:
    return f"receipt-email:{job.args['order']}"


@client.task("lab_email_naive")
def email_naive(job: Any) -> None:
    started(job)
    post_email(job, "plain", order_email(job.args["order"]), key=None)
    crash_window(job, "email sent, job not acknowledged yet")
    trace(job, "returning", "the worker acknowledges the job (completed)")


@client.task("lab_email_keyed")
def email_keyed(job: Any) -> None:
    started(job)
    key = idempotency_key(TENANT, operation_key(job))
    try:
        post_email(job, "idempotent", order_email(job.args["order"]), key=key)
    except ProviderRefused as refused:
        trace(job, "provider refused", str(refused))
        raise TerminalError(f"{refused.body.get('error')}: {refused}") from refused
    crash_window(job, "email sent, job not acknowledged yet")
    trace(job, "returning", "the worker acknowledges the job (completed)")


@client.task("lab_email_receipt")
def email_with_receipt(job: Any) -> Any:
    started(job)
    order = job.args["order"]
    account = job.args["provider"]
    message = order_email(order)

    def send(key: str) -> dict[str, Any]:
        answer = post_email(job, account, message, key=key)
        crash_window(job, "email sent, outcome not saved yet (the claim is committed)")
        return {"message_id": answer["message_id"], "replayed": answer["replayed"]}

    def record(outcome: dict[str, Any]) -> None:
        # The business effect, in the transaction that records the outcome.
        conn.execute(
            f"UPDATE {SCHEMA}.orders SET receipt_message_id = %s WHERE order_id = %s", (outcome["message_id"], order)
        )

    with psycopg.connect(DATABASE_URL) as conn:
        try:
            done = external_effect(
                conn, TENANT, operation_key(job), message, send, idempotent=account == "idempotent", record=record
            )
        except OutcomeUnknown as unknown:
            trace(job, "outcome unknown", f"{unknown}; parking the job for reconciliation")
            return park_for_reconciliation(job, unknown)
        except ReceiptConflict as conflict:
            trace(job, "receipt conflict", str(conflict))
            raise TerminalError(f"ReceiptConflict: {conflict}") from conflict
    trace(job, f"receipt {done.status}", f"outcome {done.outcome} recorded with order {order}'s message id")
    trace(job, "returning", "the worker acknowledges the job (completed)")
    return None


@client.task("lab_email_ack_first")
def email_ack_first(job: Any) -> None:
    started(job)
    message = order_email(job.args["order"])

    def later() -> None:
        time.sleep(DEFERRED_EFFECT_DELAY)
        post_email(job, "plain", message, key=None)

    threading.Thread(target=later, name="deferred-email", daemon=True).start()
    trace(job, "acknowledged first", "returning now; the email waits in an in-memory queue of this process")


# -- the database effect: a refund row ----------------------------------------------------------


def save_refund(conn: psycopg.Connection[Any], job: Any) -> int:
    """The business effect: one refund row (think: money sent to a customer)."""
    row = conn.execute(
        f"INSERT INTO {SCHEMA}.effects (case_name, job_id, attempt, order_id, amount_cents) "
        "VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (job.args["case"], job.id, job.attempt, job.args["order"], job.args["amount_cents"]),
    ).fetchone()
    assert row is not None  # INSERT ... RETURNING returns the row
    return int(row[0])


@client.task("lab_refund")
def refund(job: Any) -> None:
    started(job)
    with psycopg.connect(DATABASE_URL) as conn:
        effect_id = save_refund(conn, job)
        conn.commit()
    trace(job, "effect committed", f"refund #{effect_id} for order {job.args['order']}")
    crash_window(job, "effect committed, job not acknowledged yet")
    trace(job, "returning", "the worker acknowledges the job (completed)")


@client.task("lab_refund_with_receipt")
def refund_with_receipt(job: Any) -> None:
    started(job)
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
    crash_window(job, "effect committed, job not acknowledged yet")
    trace(job, "returning", "the worker acknowledges the job (completed)")


@client.task("lab_refund_ack_first")
def refund_ack_first(job: Any) -> None:
    started(job)

    def later() -> None:
        time.sleep(DEFERRED_EFFECT_DELAY)
        with psycopg.connect(DATABASE_URL) as conn:
            effect_id = save_refund(conn, job)
            conn.commit()
        trace(job, "effect committed", f"refund #{effect_id}, {DEFERRED_EFFECT_DELAY:.0f} s after the ack")

    threading.Thread(target=later, name="deferred-effect", daemon=True).start()
    trace(job, "acknowledged first", "returning now; the refund waits in an in-memory queue of this process")


@client.task("lab_refund_transactional", transactional=True)
def refund_transactional(job: Any) -> None:
    started(job)
    effect_id = save_refund(job.conn, job)
    trace(job, "effect written", f"refund #{effect_id} on job.conn, uncommitted: it commits with the completion")
    crash_window(job, "effect written in the completion transaction, not committed yet")
    trace(job, "returning", "the worker commits the refund and the completion together")
