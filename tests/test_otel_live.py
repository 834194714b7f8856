"""The live follower (`agentlog otel --db`) beside a running graph: killed with SIGKILL
mid-run and started again, it delivers every span of the log at least once to a real
OTLP/HTTP receiver, a span sent twice with the same ids and content, and a run that began
before the kill ends in the span it began, which `agentlog otel export` rebuilds alike."""

from __future__ import annotations

import asyncio
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentlog.actors import END, StateGraph
from agentlog.actors.otel import spans_of_thread
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.events.cursors import load_cursor
from agentlog.events.follow import last_position
from agentlog.projections import AgentState, Message
from tests.helpers import ROOT
from tests.otlp_receiver import Received, Receiver, otlp_receiver

pytestmark = pytest.mark.slow


def start_follower(db: Path, receiver: Receiver, *options: str) -> subprocess.Popen[str]:
    """`agentlog otel --db DB` exporting to the receiver, once it says it follows."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OTEL_SERVICE_NAME": "desk",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", "otel", "--db",
         str(db), *options],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    readable, _, _ = select.select([proc.stderr], [], [], 60.0)
    line = proc.stderr.readline() if readable else ""
    if not line.startswith("following"):
        proc.kill()
        raise AssertionError(f"the follower did not start: {line!r}{proc.communicate()[1]}")
    return proc


def waiting_graph(gate: asyncio.Event, store: SQLiteEventStore) -> Any:
    async def work(state: AgentState) -> list[Message]:
        if state.context[-1].text() == "wait":
            await gate.wait()
        return [Message.text_message("done", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(name="desk")
    graph.add_node("work", work)
    graph.add_node("check", lambda state: [])
    graph.set_entry_point("work")
    graph.add_edge("work", "check")
    graph.add_edge("check", END)
    return graph.compile(store)


def key(span: Received) -> tuple[Any, ...]:
    return (span.name, span.trace_id, span.parent_span_id, span.start_ns, span.end_ns,
            sorted(span.attributes.items()), span.events)  # fmt: skip


async def test_a_follower_killed_mid_run_and_restarted_delivers_every_span(
    tmp_path: Path,
) -> None:
    db = tmp_path / "live.db"
    gate = asyncio.Event()
    with otlp_receiver() as receiver:
        async with SQLiteEventStore(db) as store:
            app = waiting_graph(gate, store)
            follower = start_follower(db, receiver, "--checkpoint-s", "0.05")
            try:
                # 1. Killed with a run under way, its position saved past the run's start.
                await app.ainvoke("hello", {"thread_id": "a"})
                long_run = asyncio.create_task(app.ainvoke("wait", {"thread_id": "long"}))
                await app.ainvoke("hello", {"thread_id": "b"})
                end = await last_position(store)

                async def saved() -> bool:
                    return await load_cursor(store, "otel") >= end

                await until(saved, what="the cursor past a, the start of long, and b")
                kill(follower)
                # 2. Restarted, it ends the run begun before the kill, then is killed again
                # before it saves any position: what it sent is sent once more in step 3.
                follower = start_follower(db, receiver, "--checkpoint-s", "3600")
                gate.set()
                await long_run
                await app.ainvoke("hello", {"thread_id": "c"})
                again = {f"{s.span_id:016x}" for t in ("long", "c")
                         for s in await spans_of_thread(store, t)}  # fmt: skip

                async def sent(count: int) -> bool:
                    ids = [s.span_id for s in receiver.spans]
                    return all(ids.count(span_id) >= count for span_id in again)

                await until(lambda: sent(1), what="the spans of long and c")
                assert await load_cursor(store, "otel") == end
                kill(follower)
                # 3. Restarted from the saved position: long's and c's spans come again.
                follower = start_follower(db, receiver)
                await until(lambda: sent(2), what="the spans of long and c, a second time")
                expected = {}
                for thread in ("a", "b", "long", "c"):
                    for span in await spans_of_thread(store, thread):
                        expected[f"{span.span_id:016x}"] = span
            finally:
                follower.send_signal(signal.SIGTERM)
                _, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    copies: dict[str, list[Received]] = {}
    for span in receiver.spans:
        copies.setdefault(span.span_id, []).append(span)
    assert copies.keys() == expected.keys()
    for span_id, spans in copies.items():
        assert len({repr(key(s)) for s in spans}) == 1, f"{span_id} was sent in two versions"
        assert len(spans) == (2 if span_id in again else 1)
        want = expected[span_id]
        assert spans[0].name == want.name
        assert spans[0].trace_id == f"{want.trace_id:032x}"
        assert (spans[0].start_ns, spans[0].end_ns) == (want.start_ns, want.end_ns)
        assert spans[0].attributes == want.attributes
    (long_span,) = [s for s in expected.values() if s.attributes.get("agentlog.thread_id")
                    == "long" and s.name == "invoke_agent desk"]  # fmt: skip
    assert long_span.attributes["agentlog.outcome"] == "completed"
    assert long_span.attributes["agentlog.seq"] == 1  # begun before the first kill
    assert long_span.events == ()


def kill(follower: subprocess.Popen[str]) -> None:
    follower.send_signal(signal.SIGKILL)
    follower.wait()
