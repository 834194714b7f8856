"""The official `langgraph-sdk` streaming a run's live parts (`custom`, token deltas) from a
server, as a LangGraph user writes it. Run by the Python that has it (the LangGraph venv):

    python live_program.py URL API_KEY

Prints one JSON line per stream: {"stream", "parts": [[event, data], ...]}.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langgraph_sdk import get_client

URL, KEY = sys.argv[1], sys.argv[2]
USER = {"messages": [{"role": "user", "content": "owls?"}]}
MODES = ["custom", "messages-tuple", "messages", "updates", "values"]


def report(stream: str, parts: list[Any]) -> None:
    shown = [[p.event, p.data] for p in parts]
    print(json.dumps({"stream": stream, "parts": shown}), flush=True)


async def main() -> None:
    client = get_client(url=URL, api_key=KEY)
    thread = await client.threads.create()
    tid = thread["thread_id"]
    parts = [p async for p in client.runs.stream(tid, "talk", input=USER, stream_mode=MODES)]
    report("talk", parts)
    run_id = parts[0].data["run_id"]
    joined = client.runs.join_stream(tid, run_id, stream_mode=MODES)
    report("joined after its end", [p async for p in joined])
    events = client.runs.stream(None, "talk", input=USER, stream_mode="events")
    report("events", [p async for p in events])
    flood = client.runs.stream(
        None, "flood", input=USER, stream_mode=["custom", "messages", "values"]
    )
    report("flood", [p async for p in flood])


asyncio.run(main())
