"""A run's live parts through `agentlog serve`, read by LangGraph's official Python SDK (in
LangGraph's venv) from a real server process on a loopback port: what a node writes with
`get_stream_writer()` comes as `custom`, a fake chat model's token chunks as `messages`
tuples and as `messages/metadata` then `messages/partial` with the message so far, and as
`on_chat_model_stream` events; all of them before the node's `updates` and `values`. A stream
joined after the run ended replays the log (the whole message, `messages/complete`) and no
delta. A node that writes more custom parts at once than a stream holds loses the rest for
that stream (its model's chunks too, the whole message then coming from the log), the run
going on to its end; so does a client that stops reading its stream while a run writes
more than the connection holds: the run ends, and the stream, read again, has lost parts.
A subgraph node's custom part comes as `custom|namespace` with `stream_subgraphs`, and not
without it. A model node of agentlog's own (`ModelNode`, over the fake provider) streams its
deltas as one message's chunks, and a stream joined later gets its whole answer."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import openai

from agentlog.actors.http import create_app
from agentlog.actors.models import ModelNode
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.runtime.live import BUFFER
from agentlog.events import SQLiteEventStore
from agentlog.langgraph import StateGraph, add_messages, get_stream_writer
from tests.agentserver.app import ANSWER, FLOOD
from tests.helpers import ROOT, line
from tests.test_agentserver_clients import peer, serving
from tests.test_serve import Server
from tests.workers.fake_provider import FakeProvider

PROGRAM = ROOT / "tests" / "agentserver" / "live_program.py"
__all__ = ["peer"]


def streams(tmp_path: Path, python: Path) -> dict[str, list[tuple[str, Any]]]:
    with serving(tmp_path) as url:
        ran = subprocess.run(
            [str(python), str(PROGRAM), url, "sk-ann"],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-4000:]
    lines = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    return {s["stream"]: [(e, d) for e, d in s["parts"]] for s in lines}


def test_the_sdk_streams_custom_parts_and_token_deltas_in_place(tmp_path: Path, peer: Path) -> None:
    got = streams(tmp_path, peer)
    talk = got["talk"]
    names = [e for e, _ in talk]
    assert names[0] == "metadata" and names[-1] == "end", names
    assert ("custom", {"thinking": True}) in talk
    tuples = [d for e, d in talk if e == "messages"]
    assert len(tuples) > 1, names  # one per token chunk
    for chunk, metadata in tuples:
        assert chunk["type"] == "AIMessageChunk" and chunk["id"], chunk
        assert metadata["langgraph_node"] == "speak" and metadata["langgraph_step"] == 1
    assert "".join(chunk["content"] for chunk, _ in tuples) == ANSWER
    ident = tuples[0][0]["id"]
    assert [d for e, d in talk if e == "messages/metadata"] == [
        {ident: {"metadata": tuples[0][1]}}
    ]  # once per message
    partials = [d for e, d in talk if e == "messages/partial"]
    assert len(partials) == len(tuples)
    assert all(p[0]["type"] == "ai" and p[0]["id"] == ident for p in partials), partials
    assert [p[0]["content"] for p in partials][-1] == ANSWER  # the message so far, each time
    assert ANSWER.startswith(partials[0][0]["content"]), partials[0]
    assert "messages/complete" not in names  # streamed: not sent again whole
    # in order: the input's values, the node's custom part and deltas, then its step's
    last_delta = max(i for i, n in enumerate(names) if n.startswith("messages"))
    assert names.index("values") < names.index("custom") < names.index("messages")
    assert last_delta < names.index("updates") < len(names) - 2
    assert names[-2] == "values" and talk[-2][1]["messages"][-1]["content"] == ANSWER

    joined = got["joined after its end"]
    later = [e for e, _ in joined]
    assert "custom" not in later and "messages/partial" not in later, later
    assert [d[0]["content"] for e, d in joined if e == "messages/complete"] == [ANSWER]
    assert [d[0]["content"] for e, d in joined if e == "messages"] == [ANSWER]

    events = [d for e, d in got["events"] if e == "events"]
    kinds = [d["event"] for d in events]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end", kinds
    tokens = [d for d in events if d["event"] == "on_chat_model_stream"]
    assert "".join(d["data"]["chunk"]["content"] for d in tokens) == ANSWER

    flood = got["flood"]
    written = [d["n"] for e, d in flood if e == "custom"]
    assert FLOOD > BUFFER and written == list(range(BUFFER))  # the rest dropped for it
    later = [e for e, _ in flood][BUFFER + 2 :]
    assert later == ["messages/metadata", "messages/complete", "values", "end"], later
    assert flood[-3][1][0]["content"] == ANSWER  # its chunks dropped: the whole message
    assert flood[-2][1]["messages"][-1]["content"] == ANSWER  # the run went on


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


def inner(state: Chat) -> dict[str, Any]:
    get_stream_writer()({"inside": True})
    return {"messages": [{"role": "assistant", "content": "from inside"}]}


async def test_a_subgraph_nodes_custom_part_comes_under_its_namespace(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "nest.db") as store:
        sub = StateGraph(Chat)
        sub.add_node("inner", inner)
        sub.set_entry_point("inner")
        outer = StateGraph(Chat)
        outer.add_node("outer", sub.compile(store))
        outer.set_entry_point("outer")
        runtime = AgentRuntime(store)
        runtime.add_graph("nest", outer.compile(store).graph_engine)
        runtime.register_entry_point(EntryPoint(id="nest", graph_id="nest"))
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            seen = {}
            for subgraphs in (False, True):
                body = {
                    "assistant_id": "nest",
                    "input": {"messages": [{"role": "user", "content": "hi"}]},
                    "stream_mode": ["custom", "updates"],
                    "stream_subgraphs": subgraphs,
                }
                async with client.stream("POST", "/runs/stream", json=body) as answer:
                    text = "".join([chunk async for chunk in answer.aiter_text()])
                lines = text.splitlines()
                seen[subgraphs] = [
                    (line.removeprefix("event: "), json.loads(after.removeprefix("data: ")))
                    for line, after in itertools.pairwise(lines)
                    if line.startswith("event: ")
                ]
    assert [e for e, _ in seen[False]] == ["metadata", "updates", "end"]
    names = [e for e, _ in seen[True]]
    assert names[0] == "metadata" and names[2:] == ["updates", "end"], names
    assert names[1].startswith("custom|outer:") and seen[True][1][1] == {"inside": True}


PIECES = 4000
PIECE = "x" * 10_000
"""What `chatty` writes: 40 MB, more than a loopback connection and a stream's buffer hold."""


def chatty(state: Chat) -> dict[str, Any]:
    write = get_stream_writer()
    for n in range(PIECES):
        write({"n": n, "text": PIECE})
    return {"messages": [{"role": "assistant", "content": "said it all"}]}


async def test_a_client_that_stops_reading_never_holds_the_run(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "chatty.db") as store:
        graph = StateGraph(Chat)
        graph.add_node("chatty", chatty)
        graph.set_entry_point("chatty")
        runtime = AgentRuntime(store)
        runtime.add_graph("chatty", graph.compile(store).graph_engine)
        runtime.register_entry_point(EntryPoint(id="chatty", graph_id="chatty"))
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as slow,
            httpx.AsyncClient(base_url=url, timeout=60) as other,
        ):
            tid = (await other.post("/threads", json={})).json()["thread_id"]
            body = {
                "assistant_id": "chatty",
                "input": {"messages": [{"role": "user", "content": "talk"}]},
                "stream_mode": ["custom", "values"],
            }
            async with slow.stream("POST", f"/threads/{tid}/runs/stream", json=body) as answer:
                lines = answer.aiter_lines()
                while not (line := await anext(lines)).startswith("data: "):
                    pass
                run_id = json.loads(line.removeprefix("data: "))["run_id"]
                # the client reads no more: the run still ends
                joined = await other.get(f"/threads/{tid}/runs/{run_id}/join")
                assert joined.json()["messages"][-1]["content"] == "said it all"
                rest = [line async for line in lines if line.startswith("event: ")]
    custom = rest.count("event: custom")
    assert 0 < custom < PIECES, custom  # those written while its buffer was full: dropped
    assert rest[-2:] == ["event: values", "event: end"], rest[-3:]


def sse_events(text: str) -> list[tuple[str, Any]]:
    lines = text.splitlines()
    return [
        (head.removeprefix("event: "), json.loads(data.removeprefix("data: ")))
        for head, data in itertools.pairwise(lines)
        if head.startswith("event: ")
    ]


async def test_a_model_nodes_deltas_stream_as_one_message(tmp_path: Path) -> None:
    whole = "Your order A-1042 is eligible for a refund of 89.90."
    async with FakeProvider() as provider, SQLiteEventStore(tmp_path / "model.db") as store:
        client = openai.AsyncOpenAI(base_url=provider.openai_url, api_key="sk-test")
        runtime = AgentRuntime(store)
        runtime.add_graph("ask", line(("model", ModelNode(client, model="m"))).compile(store))
        runtime.register_entry_point(EntryPoint(id="ask", graph_id="ask"))
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            modes = ["messages-tuple", "messages", "values"]
            body = {"assistant_id": "ask", "input": "refund?", "stream_mode": modes}
            tid = (await http.post("/threads", json={})).json()["thread_id"]
            answer = await http.post(f"/threads/{tid}/runs/stream", json=body)
            live = sse_events(answer.text)
            run_id = live[0][1]["run_id"]
            later = await http.get(f"/threads/{tid}/runs/{run_id}/stream")
            joined = sse_events(later.text)
    tuples = [data for event, data in live if event == "messages"]
    assert len(tuples) > 2 and "".join(c["content"] for c, _ in tuples) == whole, tuples
    assert {m["langgraph_node"] for _, m in tuples} == {"model"}
    partials = [data[0]["content"] for event, data in live if event == "messages/partial"]
    assert partials[-1] == whole and len(partials) == len(tuples), partials
    assert len({data[0]["id"] for event, data in live if event == "messages/partial"}) == 1
    names = [event for event, _ in live]
    assert names.count("messages/metadata") == 1 and "messages/complete" not in names, names
    assert [d[0]["content"] for e, d in joined if e == "messages/complete"] == [whole]
    assert "messages/partial" not in [e for e, _ in joined]
