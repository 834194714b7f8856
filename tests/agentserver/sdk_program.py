"""LangGraph's own clients against a server, each call as a LangGraph user writes it: the
official `langgraph-sdk` (Python) and `RemoteGraph`. Run by the Python that has them (the
LangGraph venv), with the server's URL and API key:

    python sdk_program.py URL API_KEY

Prints one JSON line per call: {"client", "call", "ok", "error"}; a call is ok when it
answers without raising and its answer has the keys the SDK's TypedDict declares required.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading
import traceback
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.schema import (
    Assistant,
    AssistantVersion,
    Checkpoint,
    GraphSchema,
    Run,
    StreamPart,
    Thread,
    ThreadState,
    ThreadUpdateStateResponse,
)

URL, KEY = sys.argv[1], sys.argv[2]
USER = {"messages": [{"role": "user", "content": "hello"}]}


def report(client: str, call: str, ok: bool, error: str | None = None) -> None:
    print(json.dumps({"client": client, "call": call, "ok": ok, "error": error}), flush=True)


def shaped(value: Any, kind: Any) -> Any:
    """`value`, asserted to hold every key `kind` (a TypedDict) requires."""
    assert isinstance(value, dict), f"not an object: {value!r:.200}"
    missing = {k for k in kind.__required_keys__ if not _optional(kind, k)} - set(value)
    assert not missing, f"{kind.__name__} lacks {sorted(missing)}: {value!r:.300}"
    return value


def _optional(kind: Any, key: str) -> bool:
    """A key the TypedDict marks NotRequired (its annotations are strings in the SDK)."""
    for klass in (*getattr(kind, "__orig_bases__", ()), kind):
        note = getattr(klass, "__annotations__", {}).get(key)
        if note is not None and "NotRequired" in str(note):
            return True
    return False


def each(values: Any, kind: Any) -> Any:
    assert isinstance(values, list), f"not a list: {values!r:.200}"
    for value in values:
        shaped(value, kind)
    return values


def is_message(value: Any) -> None:
    assert isinstance(value, dict) and {"type", "content", "id"} <= set(value), value


def events(parts: list[StreamPart]) -> list[str]:
    names = [p.event for p in parts]
    assert names and names[0] == "metadata", names
    assert "run_id" in parts[0].data, parts[0]
    return names


async def collect(stream: Any) -> list[StreamPart]:
    return [part async for part in stream]


async def sdk() -> None:
    client = get_client(url=URL, api_key=KEY)
    ran: dict[str, Any] = {}

    async def call(name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        try:
            value = await fn()
        except Exception as exc:  # one call failing never stops the program
            report("sdk", name, False, f"{type(exc).__name__}: {exc}"[:500])
            traceback.print_exc(file=sys.stderr)
            return None
        report("sdk", name, True)
        ran[name] = value
        return value

    a = client.assistants
    await call("assistants.search", lambda: _each(a.search(), Assistant))
    await call("assistants.search(graph_id)", lambda: _each(a.search(graph_id="chat"), Assistant))
    await call("assistants.count", lambda: _int(a.count()))
    await call("assistants.get", lambda: _shaped(a.get("chat"), Assistant))
    await call("assistants.get_graph", lambda: _keys(a.get_graph("chat"), {"nodes", "edges"}))
    await call("assistants.get_schemas", lambda: _shaped(a.get_schemas("chat"), GraphSchema))
    await call("assistants.get_subgraphs", lambda: _dict(a.get_subgraphs("chat")))
    await call("assistants.get_versions", lambda: _each(a.get_versions("chat"), AssistantVersion))

    t = client.threads
    thread = await call("threads.create", lambda: _shaped(t.create(), Thread))
    named = str(uuid.uuid4())
    await call(
        "threads.create(thread_id, metadata)",
        lambda: _shaped(t.create(thread_id=named, metadata={"user": "ann"}), Thread),
    )
    await call(
        "threads.create(if_exists=do_nothing)",
        lambda: _shaped(t.create(thread_id=named, if_exists="do_nothing"), Thread),
    )
    await call("threads.get", lambda: _shaped(t.get(named), Thread))
    await call(
        "threads.update(metadata)",
        lambda: _shaped(t.update(named, metadata={"topic": "refunds"}), Thread),
    )
    await call("threads.search", lambda: _each(t.search(), Thread))
    await call("threads.search(metadata)", lambda: _one(t.search(metadata={"user": "ann"})))
    await call("threads.search(status)", lambda: _each(t.search(status="idle"), Thread))
    await call("threads.count", lambda: _int(t.count()))
    tid = thread["thread_id"] if thread else str(uuid.uuid4())

    r = client.runs
    await call("runs.wait", lambda: _values(r.wait(tid, "chat", input=USER)))
    await call("threads.get_state", lambda: _shaped(t.get_state(tid), ThreadState))
    history = await call("threads.get_history", lambda: _each(t.get_history(tid), ThreadState))
    first = history[-1]["checkpoint"]["checkpoint_id"] if history else "0"
    await call(
        "threads.get_state(checkpoint_id)",
        lambda: _shaped(t.get_state(tid, checkpoint_id=first), ThreadState),
    )
    await call(
        "threads.get_state(checkpoint)",
        lambda: _shaped(
            t.get_state(tid, checkpoint={"checkpoint_id": first, "thread_id": tid}), ThreadState
        ),
    )
    head = history[0]["checkpoint"]["checkpoint_id"] if history else "0"
    await call(
        "threads.get_history(before)",
        lambda: _each(t.get_history(tid, before={"checkpoint_id": head}), ThreadState),
    )
    await call(
        "threads.get_history(limit)", lambda: _each(t.get_history(tid, limit=1), ThreadState)
    )
    await call(
        "threads.update_state",
        lambda: _shaped(
            t.update_state(tid, {"messages": [{"role": "user", "content": "edited"}]}),
            ThreadUpdateStateResponse,
        ),
    )
    await call("threads.copy", lambda: _shaped(t.copy(tid), Thread))

    run = await call("runs.create", lambda: _shaped(r.create(tid, "chat", input=USER), Run))
    if run:
        await call("runs.join", lambda: _values(r.join(tid, run["run_id"])))
        await call("runs.get", lambda: _status(r.get(tid, run["run_id"]), "success"))
        await call("runs.join_stream", lambda: _events(r.join_stream(tid, run["run_id"])))
    await call("runs.list", lambda: _each(r.list(tid), Run))
    for mode in ("values", "updates", "messages-tuple", "messages", "custom", "events"):
        await call(
            f"runs.stream({mode})",
            lambda mode=mode: _mode(r.stream(tid, "chat", input=USER, stream_mode=mode), mode),
        )
    for mode in ("debug", "tasks", "checkpoints"):
        await call(
            f"runs.stream({mode})",
            lambda mode=mode: _mode(r.stream(tid, "chat", input=USER, stream_mode=mode), mode),
        )
    await call(
        "runs.stream([values, updates])",
        lambda: _mode(
            r.stream(tid, "chat", input=USER, stream_mode=["values", "updates"]), "updates"
        ),
    )
    await call(
        "runs.stream(subgraphs)",
        lambda: _mode(r.stream(tid, "chat", input=USER, stream_subgraphs=True), "values"),
    )

    paused = await call("threads.create(approval)", lambda: _shaped(t.create(), Thread))
    pid = paused["thread_id"] if paused else str(uuid.uuid4())
    await call("runs.wait(interrupt)", lambda: _interrupted(r.wait(pid, "approval", input=USER)))
    await call("threads.get(interrupted)", lambda: _thread_status(t.get(pid), "interrupted"))
    await call(
        "runs.wait(command resume)",
        lambda: _values(r.wait(pid, "approval", command={"resume": "yes"})),
    )
    edited = await call("threads.create(edit)", lambda: _shaped(t.create(), Thread))
    eid = edited["thread_id"] if edited else str(uuid.uuid4())
    await call("runs.wait(edit)", lambda: _interrupted(r.wait(eid, "approval", input=USER)))
    await call(
        "threads.update_state(as_node)",
        lambda: _shaped(
            t.update_state(
                eid,
                {"messages": [{"role": "assistant", "content": "approved by hand"}]},
                as_node="review",
            ),
            ThreadUpdateStateResponse,
        ),
    )
    # time travel: the state at an early checkpoint of the approval thread
    await call("time travel", lambda: _time_travel(client, pid))
    await call("runs.wait(checkpoint_id)", lambda: _run_at_checkpoint(client, pid))
    await call("threads.update_state(checkpoint_id)", lambda: _edit_at_checkpoint(client, pid))
    await call("runs.wait(interrupt_before)", lambda: _breakpoints(client))
    await call(
        "runs.wait(context)",
        lambda: _said(r.wait(None, "greeter", input=USER, context={"user_id": "ann"}), "hi ann"),
    )

    held = await call("threads.create(cancel)", lambda: _shaped(t.create(), Thread))
    hid = held["thread_id"] if held else str(uuid.uuid4())
    crun = await call(
        "runs.create(to cancel)", lambda: _shaped(r.create(hid, "approval", input=USER), Run)
    )
    if crun:
        await call("runs.cancel(interrupt)", lambda: r.cancel(hid, crun["run_id"], wait=True))
        await call(
            "runs.cancel(rollback)", lambda: r.cancel(hid, crun["run_id"], action="rollback")
        )
    await call("runs.wait(stateless)", lambda: _values(r.wait(None, "chat", input=USER)))
    await call(
        "runs.stream(stateless)", lambda: _mode(r.stream(None, "chat", input=USER), "values")
    )
    await call("runs.create(stateless)", lambda: _shaped(r.create(None, "chat", input=USER), Run))
    await call(
        "runs.wait(if_not_exists=create)",
        lambda: _values(r.wait(str(uuid.uuid4()), "chat", input=USER, if_not_exists="create")),
    )
    await call(
        "runs.wait(metadata, config, multitask)",
        lambda: _values(
            r.wait(
                tid,
                "chat",
                input=USER,
                metadata={"k": 1},
                config={"tags": ["x"]},
                multitask_strategy="enqueue",
            )
        ),
    )
    hook, delivered = receiver()
    await call(
        "runs.create(webhook)",
        lambda: _webhooked(r.create(tid, "chat", input=USER, webhook=hook), delivered),
    )
    later = await call("threads.create(after_seconds)", lambda: _shaped(t.create(), Thread))
    lid = later["thread_id"] if later else str(uuid.uuid4())
    await call(
        "runs.create(after_seconds) then cancel",
        lambda: _put_off(r, lid, r.create(lid, "chat", input=USER, after_seconds=3600)),
    )
    if run:
        await call("runs.delete", lambda: r.delete(tid, run["run_id"]))
    s = client.store
    await call("store.put_item", lambda: s.put_item(["users", "ann"], "prefs", {"tone": "brief"}))
    await call(
        "store.get_item", lambda: _keys(s.get_item(["users", "ann"], "prefs"), {"value", "key"})
    )
    await call("store.search_items", lambda: _keys(s.search_items(["users"]), {"items"}))
    await call("store.list_namespaces", lambda: _keys(s.list_namespaces(), {"namespaces"}))
    await call("store.delete_item", lambda: s.delete_item(["users", "ann"], "prefs"))
    c = client.crons
    cron = await call(
        "crons.create",
        lambda: _keys(c.create("chat", schedule="0 9 * * *", input=USER), {"cron_id"}),
    )
    await call("crons.search", lambda: _list(c.search()))
    if cron:
        await call("crons.delete", lambda: c.delete(cron["cron_id"]))
    await call("threads.delete", lambda: t.delete(named))


async def _shaped(value: Awaitable[Any], kind: Any) -> Any:
    return shaped(await value, kind)


async def _each(value: Awaitable[Any], kind: Any) -> Any:
    return each(await value, kind)


async def _one(value: Awaitable[Any]) -> Any:
    found = each(await value, Thread)
    assert len(found) == 1, found
    return found


async def _int(value: Awaitable[Any]) -> int:
    got = await value
    assert isinstance(got, int), got
    return got


async def _dict(value: Awaitable[Any]) -> Any:
    got = await value
    assert isinstance(got, dict), got
    return got


async def _list(value: Awaitable[Any]) -> Any:
    got = await value
    assert isinstance(got, list), got
    return got


async def _keys(value: Awaitable[Any], keys: set[str]) -> Any:
    got = await value
    assert isinstance(got, dict) and keys <= set(got), got
    return got


async def _values(value: Awaitable[Any]) -> Any:
    got = await value
    assert isinstance(got, dict) and "__error__" not in got, got
    assert got.get("messages"), got
    for message in got["messages"]:
        is_message(message)
    return got


async def _interrupted(value: Awaitable[Any]) -> Any:
    got = await value
    assert isinstance(got, dict) and got.get("__interrupt__"), got
    assert {"value", "id"} <= set(got["__interrupt__"][0]), got
    return got


def receiver() -> tuple[str, dict[str, threading.Event]]:
    """A webhook receiver on loopback: the URL, and an event per run id it got."""
    got: dict[str, threading.Event] = {}

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            got.setdefault(body["run_id"], threading.Event()).set()
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", got


async def _webhooked(value: Awaitable[Any], got: dict[str, threading.Event]) -> Any:
    """The run, once the receiver got its result (POSTed when it ended)."""
    run = shaped(await value, Run)
    arrived = got.setdefault(run["run_id"], threading.Event())
    assert await asyncio.to_thread(arrived.wait, 60), f"no webhook for {run['run_id']}"
    return run


async def _put_off(runs: Any, thread_id: str, value: Awaitable[Any]) -> Any:
    """A run put off for an hour is pending; cancelled, it ends without running."""
    run = shaped(await value, Run)
    assert run["status"] == "pending", run
    await runs.cancel(thread_id, run["run_id"])
    return await _status(runs.get(thread_id, run["run_id"]), "interrupted")


async def _status(value: Awaitable[Any], status: str) -> Any:
    got = shaped(await value, Run)
    assert got["status"] == status, got
    return got


async def _thread_status(value: Awaitable[Any], status: str) -> Any:
    got = shaped(await value, Thread)
    assert got["status"] == status and got["interrupts"], got
    return got


async def _events(stream: Any) -> Any:
    parts = await collect(stream)
    events(parts)
    return parts


async def _mode(stream: Any, mode: str) -> Any:
    parts = await collect(stream)
    names = events(parts)
    assert names[-1] == "end" or "error" not in names, names
    wanted = {"messages-tuple": "messages", "messages": "messages/complete"}.get(mode, mode)
    assert wanted in names, names
    for part in parts:
        if part.event == "values":
            assert isinstance(part.data, dict), part
        if part.event == "messages":
            is_message(part.data[0])
        if part.event == "checkpoints":
            assert {"config", "values", "next", "metadata"} <= set(part.data), part
    return parts


async def _time_travel(client: Any, thread_id: str) -> Any:
    history = each(await client.threads.get_history(thread_id, limit=100), ThreadState)
    assert len(history) >= 2, history
    oldest = history[-1]
    shaped(oldest["checkpoint"], Checkpoint)
    again = await client.threads.get_state(
        thread_id, checkpoint_id=oldest["checkpoint"]["checkpoint_id"]
    )
    assert again["values"] == oldest["values"], (again, oldest)
    return again


async def _paused_checkpoint(client: Any, thread_id: str) -> str:
    """The checkpoint of the approval thread's history where it stood before `review`."""
    history = each(await client.threads.get_history(thread_id, limit=100), ThreadState)
    return next(h for h in history if h["next"] == ["review"])["checkpoint"]["checkpoint_id"]


async def _run_at_checkpoint(client: Any, thread_id: str) -> Any:
    """A run at a past checkpoint goes on from there; the branch left stays in the history."""
    r, t = client.runs, client.threads
    point = await _paused_checkpoint(client, thread_id)
    _interrupted(await r.wait(thread_id, "approval", input=None, checkpoint_id=point))
    done = await r.wait(thread_id, "approval", command={"resume": "again"})
    assert done["messages"][-1]["content"] == "reviewed: again", done
    history = await t.get_history(thread_id, limit=100)
    endings = [h["values"]["messages"][-1]["content"] for h in history]
    assert endings[0] == "reviewed: again" and "reviewed: yes" in endings, endings
    return done


async def _breakpoints(client: Any) -> Any:
    """Breakpoints asked for one run pause that run only."""
    r, t = client.runs, client.threads
    tid = (await t.create())["thread_id"]
    paused = await r.wait(tid, "chat", input=USER, interrupt_before=["reply"])
    assert [m["content"] for m in paused["messages"]] == ["hello"], paused
    assert (await t.get_state(tid))["next"] == ["reply"]
    await _said(r.wait(tid, "chat", input=None), "you said: hello")
    await _said(r.wait(tid, "chat", input=USER, interrupt_after="*"), "you said: hello")
    assert (await t.get(tid))["status"] == "interrupted"
    return paused


async def _said(run: Awaitable[Any], text: str) -> Any:
    values = await run
    assert values["messages"][-1]["content"].startswith(text), values
    return values


async def _edit_at_checkpoint(client: Any, thread_id: str) -> Any:
    t = client.threads
    point = await _paused_checkpoint(client, thread_id)
    edit = {"messages": [{"role": "user", "content": "on second thought"}]}
    shaped(await t.update_state(thread_id, edit, checkpoint_id=point), ThreadUpdateStateResponse)
    now = await t.get_state(thread_id)
    assert now["values"]["messages"][-1]["content"] == "on second thought", now
    assert now["next"] == ["review"], now
    return now


def remote() -> None:
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.pregel.remote import RemoteGraph
    from langgraph.types import Command

    def call(name: str, fn: Callable[[], Any]) -> Any:
        try:
            value = fn()
        except Exception as exc:
            report("remote", name, False, f"{type(exc).__name__}: {exc}"[:500])
            traceback.print_exc(file=sys.stderr)
            return None
        report("remote", name, True)
        return value

    chat = RemoteGraph("chat", url=URL, api_key=KEY)
    approval = RemoteGraph("approval", url=URL, api_key=KEY)
    sync = get_sync_client(url=URL, api_key=KEY)
    tid = sync.threads.create()["thread_id"]
    config = {"configurable": {"thread_id": tid}}

    def invoked() -> Any:
        got = chat.invoke(USER, config)
        assert got["messages"][-1]["content"] == "you said: hello", got
        return got

    call("invoke", invoked)
    call(
        "stream(updates)", lambda: _nonempty(list(chat.stream(USER, config, stream_mode="updates")))
    )

    async def asynchronous() -> None:  # one event loop: the async client is bound to it
        async def acall(name: str, fn: Callable[[], Awaitable[Any]]) -> None:
            try:
                await fn()
            except Exception as exc:
                report("remote", name, False, f"{type(exc).__name__}: {exc}"[:500])
                traceback.print_exc(file=sys.stderr)
                return
            report("remote", name, True)

        async def ainvoked() -> Any:
            return _check(await chat.ainvoke(USER, config), "messages")

        async def astreamed() -> Any:
            return _nonempty([p async for p in chat.astream(USER, config, stream_mode="values")])

        async def astate() -> Any:
            return _check((await chat.aget_state(config)).values, "messages")

        await acall("ainvoke", ainvoked)
        await acall("astream(values)", astreamed)
        await acall("aget_state", astate)

    asyncio.run(asynchronous())
    call(
        "stream(messages)",
        lambda: _nonempty(list(chat.stream(USER, config, stream_mode="messages"))),
    )
    call("get_state", lambda: _check(chat.get_state(config).values, "messages"))
    call("get_state_history", lambda: _nonempty(list(chat.get_state_history(config))))
    call(
        "update_state",
        lambda: chat.update_state(config, {"messages": [{"role": "user", "content": "x"}]}),
    )
    call("get_graph", lambda: _nonempty(list(chat.get_graph().nodes)))
    pid = sync.threads.create()["thread_id"]
    pconfig = {"configurable": {"thread_id": pid}}

    def resumed() -> Any:
        first = approval.invoke(USER, pconfig)
        assert "__interrupt__" in first, first
        done = approval.invoke(Command(resume="yes"), pconfig)
        assert done["messages"][-1]["content"] == "reviewed: yes", done
        return done

    call("invoke + resume interrupt", resumed)

    def at_checkpoint() -> Any:  # RemoteGraph sends a config's checkpoint with its edits
        history = list(approval.get_state_history(pconfig))
        past = next(h for h in history if h.next == ("review",))
        edit = {"messages": [{"role": "user", "content": "later"}]}
        edited = approval.update_state(past.config, edit)
        assert approval.get_state(edited).next == ("review",), edited
        asked = approval.invoke(None, pconfig)
        assert "__interrupt__" in asked, asked
        done = approval.invoke(Command(resume="later"), pconfig)
        assert [m["content"] for m in done["messages"]][-2:] == ["later", "reviewed: later"]
        return done

    call("update_state at a past checkpoint", at_checkpoint)

    def as_node() -> Any:
        outer = StateGraph(MessagesState)
        outer.add_node("remote", chat)
        outer.add_edge(START, "remote")
        got = outer.compile().invoke(USER, {"configurable": {"thread_id": str(uuid.uuid4())}})
        assert got["messages"], got
        return got

    call("as a node of a local graph", as_node)


def _check(values: Any, key: str) -> Any:
    assert isinstance(values, dict) and values.get(key), values
    return values


def _nonempty(items: list[Any]) -> list[Any]:
    assert items, items
    return items


if __name__ == "__main__":
    asyncio.run(sdk())
    remote()
