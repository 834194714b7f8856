"""Relays to kill: `python -m tests.workers.relay_zygote`, with the broker clients imported once.

Prints "ready". Then, for each JSON line on stdin ({"db", "to", "name", "template"}), forks a
child that runs `Relay(...).run()` on the SQLite file until killed, prints "started PID",
waits for that child and prints "exited PID STATUS". A fork costs milliseconds where a new
interpreter costs a second, so a test can kill a relay dozens of times.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

import aio_pika  # noqa: F401  # imported before forking: each child starts warm
import nats  # noqa: F401
import redis.asyncio  # noqa: F401

from agentlog.actors.relay import Relay
from agentlog.events import SQLiteEventStore


async def _relay(job: dict[str, str]) -> None:
    async with SQLiteEventStore(job["db"]) as store:
        relay = Relay(
            store, job["to"], name=job["name"], subject_template=job["template"],
            batch=int(job.get("batch", 256)), poll_s=0.01, max_backoff=0.2,
        )  # fmt: skip
        await relay.run()


def main() -> None:
    logging.basicConfig(format="%(asctime)s %(process)d %(message)s", level=logging.INFO)
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: a relay until killed
            try:
                asyncio.run(_relay(job))
            finally:
                os._exit(3)
        print(f"started {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"exited {pid} {status}", flush=True)


if __name__ == "__main__":
    main()
