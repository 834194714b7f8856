"""What a run's body asks for, carried out as the Agent Server does, over the log: a run or
an edit at a past checkpoint of the thread goes back there with a record at its head (the
branch left behind stays in the log, in the history and in `verify`); the log replayed from
its first record gives the state the server shows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http import create_app
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import until
from agentlog.events import SQLiteEventStore
from agentlog.langgraph import StateGraph
from agentlog.projections.invariants import thread_findings
from agentlog.projections.views import state_at
from tests.agentserver.app import Chat, build
from tests.test_agentserver_api import USER, served

__all__ = ["served"]

Served = tuple[httpx.AsyncClient, AgentRuntime]


async def paused_then_done(http: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    """An approval thread run to its end; its checkpoint paused before `review`."""
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    first = await http.post(
        f"/threads/{thread}/runs/wait", json={"assistant_id": "approval", "input": USER}
    )
    assert "__interrupt__" in first.json(), first.text
    done = await http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "approval", "command": {"resume": "yes"}},
    )
    assert done.json()["messages"][-1]["content"] == "reviewed: yes", done.text
    history = (await http.post(f"/threads/{thread}/history", json={"limit": 100})).json()
    paused = next(h for h in history if h["next"] == ["review"])
    return thread, paused


async def replayed_is_live(runtime: AgentRuntime, http: httpx.AsyncClient, thread: str) -> None:
    """The thread's log folded from its first record (no snapshot) is the state the server
    shows, its chain verifies, and its transcript breaks no rule."""
    app = runtime.graphs["approval"].app
    state_cls = app.graph.state_cls
    replayed = await state_at(runtime.store, thread, state_cls=state_cls, use_snapshots=False)
    live = await app.aget_state({"thread_id": thread})
    assert replayed.model_dump() == live.model_dump()
    shown = (await http.get(f"/threads/{thread}/state")).json()["values"]
    assert [m["content"] for m in shown["messages"]] == [m.text() for m in replayed.context]
    assert (await runtime.store.verify(thread)).ok
    assert (await thread_findings(runtime.store, thread)).ok


async def test_a_run_at_a_past_checkpoint_goes_on_from_there(served: Served) -> None:
    http, runtime = served
    thread, paused = await paused_then_done(http)
    before = await runtime.store.last_seq(thread)
    point = {"checkpoint_id": paused["checkpoint"]["checkpoint_id"]}
    asked = await http.post(
        f"/threads/{thread}/runs/wait", json={"assistant_id": "approval", "input": None, **point}
    )
    assert asked.status_code == 200 and "__interrupt__" in asked.json(), asked.text
    again = await http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "approval", "command": {"resume": "again"}},
    )
    assert again.status_code == 200, again.text
    said = [m["content"] for m in again.json()["messages"]]
    assert said == ["hello", "you said: hello", "reviewed: again"]
    kinds = [r.kind async for r in runtime.store.read(thread, before + 1)]
    assert kinds[0] == "forked"  # the branch: a record at the head, naming the point
    history = (await http.post(f"/threads/{thread}/history", json={"limit": 100})).json()
    endings = [h["values"]["messages"][-1]["content"] for h in history]
    assert endings[0] == "reviewed: again" and "reviewed: yes" in endings  # both branches
    steps = [h["metadata"]["step"] for h in history]
    assert steps == sorted(steps, reverse=True) and len(set(steps)) == len(steps)
    await replayed_is_live(runtime, http, thread)


async def test_an_edit_at_a_past_checkpoint_branches_there(served: Served) -> None:
    http, runtime = served
    thread, paused = await paused_then_done(http)
    edit = {"messages": [{"role": "user", "content": "on second thought"}]}
    point = {"checkpoint_id": paused["checkpoint"]["checkpoint_id"]}
    edited = await http.post(f"/threads/{thread}/state", json={"values": edit, **point})
    assert edited.status_code == 200, edited.text
    now = (await http.get(f"/threads/{thread}/state")).json()
    said = [m["content"] for m in now["values"]["messages"]]
    assert said == ["hello", "you said: hello", "on second thought"]
    assert now["next"] == ["review"]
    history = (await http.post(f"/threads/{thread}/history", json={"limit": 100})).json()
    assert history[0]["checkpoint"] == now["checkpoint"]  # the head comes first
    endings = [h["values"]["messages"][-1]["content"] for h in history]
    assert "reviewed: yes" in endings  # the branch left behind stays in the history
    await replayed_is_live(runtime, http, thread)
    head = await runtime.store.last_seq(thread)
    at_head = {"checkpoint": {"checkpoint_id": now["checkpoint"]["checkpoint_id"]}}
    more = {"messages": [{"role": "user", "content": "and more"}]}
    same = await http.post(f"/threads/{thread}/state", json={"values": more, **at_head})
    assert same.status_code == 200, same.text
    kinds = [r.kind async for r in runtime.store.read(thread, head + 1)]
    assert "forked" not in kinds  # the head is where the thread stands: no branch


async def test_a_past_checkpoint_of_a_busy_thread_is_refused_writing_nothing(
    served: Served,
) -> None:
    http, runtime = served
    thread, paused = await paused_then_done(http)
    head = await runtime.store.last_seq(thread)
    forged = f"{paused['checkpoint']['checkpoint_id'].partition('-')[0]}-{'0' * 24}"
    unknown = await http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "approval", "input": USER, "checkpoint_id": forged},
    )
    assert unknown.status_code == 404, unknown.text
    assert await runtime.store.last_seq(thread) == head


@pytest.fixture
async def held(
    tmp_path: Path,
) -> AsyncIterator[tuple[httpx.AsyncClient, AgentRuntime, asyncio.Event]]:
    """A server whose `held` assistant's node waits for the gate to open."""
    gate = asyncio.Event()

    async def hold(state: Chat) -> dict[str, Any]:
        await gate.wait()
        return {"messages": [{"role": "assistant", "content": "let go"}]}

    runtime = build(SQLiteEventStore(str(tmp_path / "log.db")))
    graph = StateGraph(Chat)
    graph.add_node("hold", hold)
    graph.set_entry_point("hold")
    runtime.add_graph("held", graph.compile(runtime.store).graph_engine)
    runtime.register_entry_point(EntryPoint(id="held", graph_id="held"))
    async with runtime:
        transport = httpx.ASGITransport(app=create_app(runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            try:
                yield http, runtime, gate
            finally:
                gate.set()  # a run still held ends, so the runtime stops


async def test_a_past_checkpoint_of_a_thread_with_a_run_going_is_refused(
    held: tuple[httpx.AsyncClient, AgentRuntime, asyncio.Event],
) -> None:
    http, runtime, gate = held
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    gate.set()
    run = {"assistant_id": "held", "input": USER}
    assert (await http.post(f"/threads/{thread}/runs/wait", json=run)).status_code == 200
    (past,) = (await http.post(f"/threads/{thread}/history", json={})).json()
    gate.clear()
    going = (await http.post(f"/threads/{thread}/runs", json=run)).json()

    async def holding() -> bool:
        return await runtime.store.last_seq(thread) > past_seq

    past_seq = int(past["checkpoint"]["checkpoint_id"].partition("-")[0])
    await until(holding, what="the held run to begin")
    head = await runtime.store.last_seq(thread)
    point = {"checkpoint_id": past["checkpoint"]["checkpoint_id"]}
    for path, body in ((f"/threads/{thread}/runs/wait", {**run, **point}),
                       (f"/threads/{thread}/state", {"values": USER, **point})):  # fmt: skip
        refused = await http.post(path, json=body)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "thread_busy"
    assert await runtime.store.last_seq(thread) == head
    gate.set()
    joined = await http.get(f"/threads/{thread}/runs/{going['run_id']}/join")
    assert joined.json()["messages"][-1]["content"] == "let go"


Held = tuple[httpx.AsyncClient, AgentRuntime, asyncio.Event]


async def test_a_runs_context_reaches_its_nodes_and_is_never_recorded(served: Served) -> None:
    http, runtime = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    run = {"assistant_id": "greeter", "input": USER}
    path = f"/threads/{thread}/runs/wait"
    told = await http.post(path, json={**run, "context": {"user_id": "ann", "tone": "warm"}})
    assert told.json()["messages"][-1]["content"] == "hi ann (WARM)", told.text
    plain = await http.post(path, json=run)  # a context is the run's own, not the thread's
    assert plain.json()["messages"][-1]["content"] == "hi nobody", plain.text
    logged = [r async for r in runtime.store.read(thread)]
    logged += [r async for r in runtime.store.read(runtime.config.runtime_thread)]
    assert not any("warm" in repr(r.event) for r in logged)  # the node's words only
    head = await runtime.store.last_seq(thread)
    bad = await http.post(path, json={**run, "context": {"tone": "cold"}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_context", bad.text
    assert "user_id" in bad.text and await runtime.store.last_seq(thread) == head


async def test_breakpoints_asked_for_one_run_pause_that_run_only(served: Served) -> None:
    http, runtime = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    path = f"/threads/{thread}/runs/wait"
    run = {"assistant_id": "chat", "input": USER}
    before = await http.post(path, json={**run, "interrupt_before": ["reply"]})
    assert [m["content"] for m in before.json()["messages"]] == ["hello"], before.text
    state = (await http.get(f"/threads/{thread}/state")).json()
    assert state["next"] == ["reply"]
    going = await http.post(path, json={"assistant_id": "chat", "input": None})
    assert going.json()["messages"][-1]["content"] == "you said: hello", going.text
    after = await http.post(path, json={**run, "interrupt_after": "*"})
    assert after.json()["messages"][-1]["content"] == "you said: hello", after.text
    assert (await http.get(f"/threads/{thread}")).json()["status"] == "interrupted"
    again = await http.post(path, json=run)  # the next run has the graph's breakpoints only
    assert (await http.get(f"/threads/{thread}")).json()["status"] == "idle", again.text
    accepted = [
        r.event
        async for r in runtime.store.read(runtime.config.runtime_thread)
        if r.kind == "trigger_accepted"
    ]
    asked = [(e.interrupt_before, e.interrupt_after) for e in accepted]
    assert (["reply"], None) in asked and (None, "*") in asked  # why each run paused
    reasons = [
        r.event.reason async for r in runtime.store.read(thread) if r.kind == "interrupt_raised"
    ]
    assert reasons == ["interrupt_before", "interrupt_after"]


async def test_a_commands_update_and_goto_are_refused_writing_nothing(served: Served) -> None:
    http, runtime = served
    thread = (await http.post("/threads", json={})).json()["thread_id"]
    path = f"/threads/{thread}/runs/wait"
    first = await http.post(path, json={"assistant_id": "approval", "input": USER})
    head = await runtime.store.last_seq(thread)
    for command, why in (({"goto": "review"}, "goto"), ({"update": USER}, "update")):
        refused = await http.post(path, json={"assistant_id": "approval", "command": command})
        assert refused.status_code == 422 and why in refused.text, refused.text
    assert await runtime.store.last_seq(thread) == head, first.text
