"""A worker process for the key rotation crash tests: rotates the master key of DB.

usage: python -m tests.workers.rotate_run DB NEW_KEY_B64 SAY_AT

The old master key comes from the environment as usual. Prints "ready" once its store is
open and "wrapped N" once the Nth subject key is re-wrapped (inside the rotation's one
transaction) for each N in SAY_AT (comma-separated), then waits there on its stdin, which the
test never answers (it SIGKILLs the process instead); "done K" once the rotation committed.
"""

from __future__ import annotations

import asyncio
import base64
import sys

from agentlog.events import SQLiteEventStore, keystore


async def main(db: str, new_key: bytes, say_at: set[int]) -> None:
    wrap, count = keystore.wrap_key, 0

    def wrap_and_say(master: bytes, subject: str, key: bytes) -> bytes:
        nonlocal count
        count += 1
        if count in say_at:
            print(f"wrapped {count}", flush=True)
            sys.stdin.readline()
        return wrap(master, subject, key)

    keystore.wrap_key = wrap_and_say  # type: ignore[assignment]
    async with SQLiteEventStore(db) as store:
        print("ready", flush=True)
        changed = await keystore.rotate_master_key(store, new_key)
    print(f"done {changed}", flush=True)


if __name__ == "__main__":
    said = {int(n) for n in sys.argv[3].split(",") if n}
    asyncio.run(main(sys.argv[1], base64.urlsafe_b64decode(sys.argv[2]), said))
