"""A worker app with one every-second periodic job, for the cron failover test (R29).

Run as ``python -m awa_bridge worker tests.cron_app:client --queue cron_r29``
with ``DATABASE_URL`` set. The timings are the tests' fast ones.
"""

from __future__ import annotations

import os

from awa_bridge.worker import Client

from .waiting import FAST

QUEUE = "cron_r29"

client = Client(os.environ["DATABASE_URL"], **FAST)


@client.task("cron_beat", queue=QUEUE)
def beat(job) -> None:
    pass


client.periodic("r29_every_second", "* * * * * *", {}, kind="cron_beat", queue=QUEUE, missed_fire_policy="catch_up")
