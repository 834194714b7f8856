"""Run one call of a user's graph in this process and SIGKILL it at a chosen commit.

    python -m agentlog.actors.testing.crashrun MODULE:FACTORY DB THREAD COMMIT WHEN CALL_JSON NOW
    SEED

The graph state machine starts this for a crash "sigkill": a real process death, with
nothing flushed or released on the way out. `CALL_JSON` is {"input": value} or
{"resume": value}; `NOW` is the fake clock's time; `SEED` seeds the ids (each child its own,
or two children would mint the same message ids). Exit 0 (printing the status) means the
run ended before the chosen commit.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from typing import Any

from agentlog.actors.engine.command import Command
from agentlog.actors.testing.doubles import FakeClock, seeded_ids
from agentlog.actors.testing.faults import FaultyStore
from agentlog.events import SQLiteEventStore
from agentlog.events.errors import AgentlogError


def load_factory(spec: str) -> Any:
    """`module:attribute` (attribute may be dotted) to the object it names."""
    module_name, _, attribute = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


async def main(argv: list[str]) -> int:
    spec, db, thread_id, commit, when, call, now, seed = argv
    clock = FakeClock(float(now))
    request = json.loads(call)
    payload: Any = Command(resume=request["resume"]) if "resume" in request else request["input"]
    store = SQLiteEventStore(db, clock=clock)
    faulty = FaultyStore(store, thread_id)
    with seeded_ids(int(seed), clock=clock):
        app = load_factory(spec)(faulty)
        faulty.crash_at(int(commit), "before" if when == "before" else "after", kill=True)
        try:
            result = await app.ainvoke(payload, {"thread_id": thread_id})
            print(result["status"])
        except AgentlogError as exc:
            print(f"error:{type(exc).__name__}")
    await store.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
