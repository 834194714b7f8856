"""A relay until killed, for the relay's crash drill (tests/relay_kills.py):
`python -m tests.workers.relay_run DB URL NAME TEMPLATE BATCH LOG` runs `Relay(...).run()`
on the SQLite file DB, logging to the file LOG. The drill forks it from the fork server
(`tests.helpers.fork_worker`), which imports this module, and so the broker clients, once:
a fork costs milliseconds where a new interpreter costs a second, so a test can kill a relay
dozens of times.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import aio_pika  # noqa: F401  # imported by the fork server: each child starts warm
import nats  # noqa: F401
import redis.asyncio  # noqa: F401

from agentlog.actors.relay import Relay
from agentlog.events import SQLiteEventStore


async def _relay(db: str, to: str, name: str, template: str, batch: int) -> None:
    async with SQLiteEventStore(db) as store:
        relay = Relay(
            store, to, name=name, subject_template=template,
            batch=batch, poll_s=0.01, max_backoff=0.2,
        )  # fmt: skip
        await relay.run()


def main() -> None:
    db, to, name, template, batch, log = sys.argv[1:]
    logging.basicConfig(
        filename=log, format="%(asctime)s %(process)d %(message)s", level=logging.INFO
    )
    asyncio.run(_relay(db, to, name, template, int(batch)))


if __name__ == "__main__":
    main()
