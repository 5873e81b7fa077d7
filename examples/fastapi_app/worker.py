"""The worker: runs ``SendOrderConfirmation`` jobs.

    DATABASE_URL=postgresql://user@host/db python -m awa_bridge worker examples.fastapi_app.worker:client

The handler is transactional: its UPDATE of the order commits in the same
transaction that marks the job completed (fenced by the job's run lease), so
an order is confirmed exactly once even if the worker dies mid-job.
"""

from __future__ import annotations

import logging

from awa_bridge.worker import Client, JobContext

from .jobs import SendOrderConfirmation

log = logging.getLogger("examples.fastapi_app.worker")

client = Client()  # reads DATABASE_URL


@client.task(SendOrderConfirmation, transactional=True)
async def send_order_confirmation(job: JobContext) -> None:
    order_id = job.args.order_id
    # A real app calls its mail provider here, passing f"order-confirmation-{order_id}"
    # as the idempotency key so a retried attempt cannot send twice.
    log.info("sending the confirmation of order %s to %s", order_id, job.args.email)
    await job.conn.execute(
        "UPDATE orders SET status = 'confirmed', confirmed_at = now() WHERE id = $1 AND status = 'pending'",
        order_id,
    )
