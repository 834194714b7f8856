"""Replay tests (`agentlog.actors.replay`): a recorded corpus replays the same under the code
that wrote it; each planted change is named at its thread, step and node with its cause;
no tool runs during a replay; a resume under changed code applies `on_code_change`."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentlog.actors.cli import app as cli_app
from agentlog.actors.engine.fingerprint import CodeChangedError, CodeChangeWarning
from agentlog.actors.examples.support import support_graph
from agentlog.actors.replay import Allowed, replay_test
from agentlog.events import MemoryEventStore, Resumed, SQLiteEventStore
from agentlog.events.audit import export_jsonl
from agentlog.projections import Message
from tests import replay_graphs as graphs
from tests.workers.fake_provider import FakeProvider, Reply


@pytest.fixture(autouse=True)
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `write_note` writes in these tests: a file of the test's own."""
    path = tmp_path / "notes.txt"
    monkeypatch.setattr(graphs, "NOTES", path)
    return path


@pytest.fixture
async def server() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as running:
        yield running


async def record(store: MemoryEventStore | SQLiteEventStore, server: FakeProvider | None) -> None:
    """The corpus: the demo agent approved after a human edit, one cancelled, a fork; a
    model asking for parallel tools (one writes a file); a fan-out graph."""
    app = support_graph(store)
    cfg = {"thread_id": "demo"}
    await app.ainvoke({"messages": [Message.text_message("refund A-1042")]}, cfg)
    state = await app.aget_state(cfg)
    edited = state.context[-1].model_dump()
    edited["content"][1]["args"]["amount"] = 50.0  # the supervisor lowers the refund
    await app.aupdate_state(cfg, {"messages": [Message.model_validate(edited)]}, reason="lower")
    await app.ainvoke(None, {**cfg, "user": "supervisor"})
    await app.ainvoke({"messages": [Message.text_message("refund A-1042")]}, {"thread_id": "cut"})
    await app.acancel({"thread_id": "cut"}, by="supervisor", reason="duplicate")
    fork = await app.afork(cfg, at_step=2, new_thread_id="demo-fork")
    await app.ainvoke(None, {"thread_id": fork})
    if server is None:
        return

    server.script(
        Reply(body=graphs.chat_body(("lookup_order", {"order_id": "A-7"}),
                                    ("write_note", {"text": "customer asked"}))),
        Reply(body=graphs.chat_body(text="Order A-7 was delivered.")),
    )  # fmt: skip
    tools = graphs.tools_graph(store, url=server.openai_url)
    await tools.ainvoke({"messages": [Message.text_message("where is A-7?")]}, {"thread_id": "par"})
    await graphs.fan_graph(store).ainvoke("go", {"thread_id": "fan"})


def by_thread(report: Any) -> dict[str, Any]:
    return {t.thread_id: t for t in report.threads}


async def test_the_corpus_replays_the_same_and_no_tool_runs(
    server: FakeProvider, tmp_path: Path
) -> None:
    store = MemoryEventStore()
    await record(store, server)
    assert (tmp_path / "notes.txt").read_text() == "customer asked\n"  # the tool ran once
    asked = len(server.requests)
    demo = await replay_test(support_graph, store=store, threads=["demo", "cut", "demo-fork"])
    tools = await replay_test(graphs.tools_graph, store=store, threads=["par"])
    fan = await replay_test(graphs.fan_graph, store=store, threads=["fan"])
    for report in (demo, tools, fan):
        assert report.ok, report.render()
        assert all(t.status == "same" for t in report.threads), report.render()
    assert by_thread(demo)["demo"].steps == 5
    assert by_thread(tools)["par"].steps == 3
    assert (tmp_path / "notes.txt").read_text() == "customer asked\n"  # not written again
    assert len(server.requests) == asked  # no model was called


PLANTED = [
    # (builder, thread, step, node, cause, a changed part the fingerprint names)
    (graphs.support_router_changed, "demo", 3, "agent", "graph_shape", "condition after 'agent'"),
    (graphs.support_extra_message, "demo", 3, "agent", "node_output", "node 'agent'"),
    (graphs.support_new_node, "demo", 2, "lookup", "graph_shape", "node 'audit' added"),
    (graphs.fan_graph_reordered, "fan", 1, "prep", "graph_shape", "edges"),
    (graphs.tools_graph_prompt, "par", 1, "agent", "model_request", "node 'agent'"),
    (graphs.tools_graph_schema, "par", 1, "agent", "model_request", "lookup_order': schema"),
]


@pytest.mark.parametrize(
    ("builder", "thread", "step", "node", "cause", "part"),
    PLANTED,
    ids=["router", "extra-message", "new-node", "reordered-edge", "prompt", "tool-schema"],
)
async def test_a_planted_change_is_named(
    server: FakeProvider,
    tmp_path: Path,
    builder: Any,
    thread: str,
    step: int,
    node: str,
    cause: str,
    part: str,
) -> None:
    store = MemoryEventStore()
    await record(store, server)
    report = await replay_test(builder, store=store)
    diverged = [t for t in report.threads if t.status == "diverged"]
    assert not report.ok
    first = next(t for t in diverged if t.thread_id == thread)
    d = first.divergence
    assert d is not None
    assert (d.step, d.node, d.cause) == (step, node, cause), report.render()
    assert any(part in line for line in d.changed), d.changed
    assert d.run == 1 and d.run_id
    assert d.log != d.produced
    assert (tmp_path / "notes.txt").read_text() == "customer asked\n"


async def test_allowed_differences_let_a_node_differ(server: FakeProvider) -> None:
    store = MemoryEventStore()
    await record(store, server)
    strict = await replay_test(graphs.fan_graph_b_changed, store=store, threads=["fan"])
    d = strict.threads[0].divergence
    assert d is not None and (d.step, d.node, d.cause) == (2, "b,c", "node_output")
    assert d.changed == []  # a captured text is configuration: the output names the node
    allowed = Allowed.of(nodes=["b"])
    report = await replay_test(
        graphs.fan_graph_b_changed, store=store, threads=["fan"], allowed=allowed
    )
    assert report.ok, report.render()

    # a normaliser blanks what may differ, on both sides
    def blank(kind: str, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "message": None} if kind == "message_appended" else body

    report = await replay_test(
        graphs.fan_graph_b_changed,
        store=store,
        threads=["fan"],
        allowed=Allowed.of(normalisers=[blank]),
    )
    assert report.ok, report.render()


async def test_resume_under_changed_code_applies_the_policy(server: FakeProvider) -> None:
    store = MemoryEventStore()
    old = support_graph(store)
    cfg = {"thread_id": "paused"}
    await old.ainvoke({"messages": [Message.text_message("refund A-1042")]}, cfg)
    new = graphs.support_extra_message(store)
    before = await store.last_seq("paused")
    with pytest.raises(CodeChangedError, match="node 'agent': code changed"):
        await new.ainvoke(None, cfg, on_code_change="refuse")
    assert await store.last_seq("paused") == before  # refused before anything was written
    with pytest.warns(CodeChangeWarning, match="node 'agent'"):
        await new.ainvoke(None, cfg)  # warn is the default
    resumed = [r.event async for r in store.read("paused") if isinstance(r.event, Resumed)]
    change = resumed[-1].code_change
    assert change is not None and change["policy"] == "warn"
    assert "node 'agent': code changed" in change["changed"]  # type: ignore[operator]
    assert change["to"] == new.engine.fingerprint["hash"]


async def test_allow_records_without_warning_and_same_code_records_nothing() -> None:
    store = MemoryEventStore()
    await support_graph(store).ainvoke("refund A-1042", {"thread_id": "a"})
    await support_graph(store).ainvoke("refund A-1042", {"thread_id": "b"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await graphs.support_new_node(store).ainvoke(
            None, {"thread_id": "a", "on_code_change": "allow"}
        )
        await support_graph(store).ainvoke(None, {"thread_id": "b"}, on_code_change="refuse")
    resumed = {
        t: [r.event async for r in store.read(t) if isinstance(r.event, Resumed)][-1]
        for t in ("a", "b")
    }
    assert resumed["a"].code_change is not None and resumed["a"].code_change["policy"] == "allow"
    assert resumed["b"].code_change is None


async def test_an_unknown_policy_is_refused() -> None:
    from agentlog.actors import GraphError

    app = support_graph(MemoryEventStore())
    with pytest.raises(GraphError, match="on_code_change must be one of"):
        await app.ainvoke("hi", {"thread_id": "x"}, on_code_change="maybe")  # type: ignore[arg-type]


async def record_demo(db: Path, folder: Path) -> None:
    async with SQLiteEventStore(db) as store:
        await record(store, None)
        folder.mkdir()
        for thread in ("demo", "cut", "demo-fork"):
            await export_jsonl(store, thread, folder / f"{thread}.jsonl")


def test_the_command_line_reads_exports_and_exits_nonzero_on_divergence(tmp_path: Path) -> None:
    db, folder = tmp_path / "prod.db", tmp_path / "threads"
    asyncio.run(record_demo(db, folder))
    runner = CliRunner()
    ok = runner.invoke(
        cli_app,
        ["replay-test", "--app", "agentlog.actors.examples.support:support_graph",
         "--export", str(folder), "--json"],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert (data["threads"], data["same"], data["diverged"]) == (3, 3, 0)
    bad = runner.invoke(
        cli_app,
        ["replay-test", "--app", "tests.replay_graphs:support_new_node", "--db", str(db),
         "--threads", "demo"],
    )  # fmt: skip
    assert bad.exit_code == 1, bad.output
    assert "DIVERGED  'demo' run 1" in bad.output and "graph_shape" in bad.output


USER_TESTS = """
import pytest
from agentlog import END
from agentlog.actors.examples import support


def refunds_end(store):
    def route(state):
        calls = state.context[-1].tool_calls()
        return END if calls and calls[0].name == "issue_refund" else support.route(state)

    graph = support.support_graph(store).graph
    branch = graph.branches["agent"]
    graph.branches["agent"] = type(branch)(route, branch.path_map)
    return graph.compile(checkpointer=store, interrupt_before=["refund"])


@pytest.mark.replay_threads(app="agentlog.actors.examples.support:support_graph", exports="threads")
def test_same(replayed_thread):
    assert replayed_thread.status == "same"


@pytest.mark.replay_threads(app=refunds_end, exports="threads")
def test_changed(replayed_thread):
    pass
"""


def test_the_pytest_marker_makes_one_test_per_exported_thread(tmp_path: Path) -> None:
    import subprocess
    import sys

    asyncio.run(record_demo(tmp_path / "prod.db", tmp_path / "threads"))
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "test_user.py"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "3 failed, 3 passed" in out, out  # the changed router diverges on every thread
    assert "FAILED test_user.py::test_changed[demo]" in out
    assert "DIVERGED  'demo' run 1" in out and "graph_shape" in out


def test_the_replay_plugin_loads_nothing_of_agentlog_until_used() -> None:
    import subprocess
    import sys
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="pytest11") if e.name == "agentlog_replay"] == [
        "agentlog.actors.replay.plugin"
    ]
    code = (
        "import sys\n"
        "import agentlog.actors.replay.plugin\n"
        "ours = sorted(m for m in sys.modules if m.split('.')[0] in ('agentlog', 'pydantic'))\n"
        "assert ours == ['agentlog', 'agentlog.actors', 'agentlog.actors.replay', "
        "'agentlog.actors.replay.plugin', 'agentlog.lazy'], ours\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def test_the_runtime_applies_its_on_code_change_policy_to_a_resume() -> None:
    from agentlog.actors.runtime import AgentRuntime, EntryPoint, RegistrationError, RuntimeConfig

    with pytest.raises(RegistrationError, match="on_code_change must be one of"):
        RuntimeConfig(on_code_change="sometimes")  # type: ignore[arg-type]
    store = MemoryEventStore()
    first = AgentRuntime(store)
    first.add_graph("support", support_graph(store))
    first.register_entry_point(EntryPoint(id="api", graph_id="support"))
    async with first:
        thread = await first.trigger("api", "refund A-1042")
        paused = await first.wait(thread, timeout=30)
    assert paused["status"] == "interrupted_before"
    second = AgentRuntime(store, RuntimeConfig(on_code_change="allow"))
    second.add_graph("support", graphs.support_extra_message(store))
    second.register_entry_point(EntryPoint(id="api", graph_id="support"))
    async with second:
        await second.inject_input(thread, None, actor="alice")
        await second.wait(thread, timeout=30)
    resumed = [r.event async for r in store.read(thread) if isinstance(r.event, Resumed)]
    assert resumed[-1].code_change is not None
    assert resumed[-1].code_change["policy"] == "allow"
    assert "node 'agent': code changed" in resumed[-1].code_change["changed"]  # type: ignore[operator]


async def test_a_replay_can_start_from_a_chosen_step(server: FakeProvider) -> None:
    store = MemoryEventStore()
    await record(store, server)
    report = await replay_test(support_graph, store=store, threads=["demo"], from_step=2)
    assert report.ok, report.render()
    assert report.threads[0].steps == 3  # steps 3 to 5
    changed = await replay_test(graphs.support_router_changed, store=store, from_step=2)
    d = by_thread(changed)["demo"].divergence
    assert d is not None and (d.step, d.node, d.cause) == (3, "agent", "graph_shape")
    # a change before the chosen step is not seen from there
    later = await replay_test(graphs.support_new_node, store=store, threads=["demo"], from_step=2)
    assert later.ok, later.render()
    missing = await replay_test(support_graph, store=store, threads=["demo"], from_step=99)
    assert missing.threads[0].status == "skipped"
    assert missing.threads[0].reason == "it has no step 99"


async def test_a_stop_between_nodes_is_replayed_where_it_landed() -> None:
    store = MemoryEventStore()
    app = graphs.stop_graph(store)
    cfg = {"thread_id": "stopped"}
    graphs.STOPPER.append(lambda: app.astop(cfg, between_nodes=True))
    try:
        paused = await app.ainvoke("go", cfg)
    finally:
        graphs.STOPPER.clear()
    assert paused["status"] == "interrupted_after"  # stopped after node a
    done = await app.ainvoke(None, cfg)
    assert done["status"] == "completed"
    kinds = [r.kind async for r in store.read("stopped")]
    assert "stop_requested" in kinds and "stopped" in kinds
    same = await replay_test(graphs.stop_graph, store=store)
    assert same.ok and same.threads[0].status == "same", same.render()
    changed = await replay_test(graphs.stop_graph_b_changed, store=store)
    d = changed.threads[0].divergence
    assert d is not None and (d.step, d.node, d.cause) == (2, "b", "node_output"), changed.render()


FORGED = "x\n PASS  'forged' (9 steps)\x1b[31m"
"""A stored value that, printed raw, would add a line of its own to a report and colour it."""


async def record_hostile(db: Path) -> None:
    """The fan-out thread as a hostile log holds it: its opening's input and its graph's
    fingerprint (one more edge, from a node named with FORGED) carry FORGED."""
    from msgspec.structs import replace

    from agentlog.actors.replay.runner import _write_as_recorded
    from agentlog.events.kinds import RunStarted

    scratch = MemoryEventStore()
    await graphs.fan_graph(scratch).ainvoke("go", {"thread_id": "fan"})
    records = []
    async for r in scratch.read("fan"):
        if isinstance(r.event, RunStarted) and r.event.fingerprint:
            shape = {**r.event.fingerprint, "hash": "planted"}
            shape["edges"] = [*shape["edges"], [FORGED, "done"]]
            r = replace(r, event=replace(r.event, fingerprint=shape, input=FORGED))
        records.append(r)
    async with SQLiteEventStore(db) as store:
        await _write_as_recorded(store, records)


def test_stored_text_cannot_forge_a_line_of_the_report_or_reach_the_terminal(
    tmp_path: Path,
) -> None:
    db = tmp_path / "hostile.db"
    asyncio.run(record_hostile(db))
    runner = CliRunner()
    args = ["replay-test", "--app", "tests.replay_graphs:fan_graph_b_changed", "--db", str(db)]
    shown = runner.invoke(cli_app, args)
    assert shown.exit_code == 1, shown.output
    assert "\x1b" not in shown.output
    lines = shown.output.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("PASS")], shown.output
    assert "  code changed: edge x\\n PASS  'forged' (9 steps)\\x1b[31m -> done removed" in lines
    assert lines[-1] == "1 threads: 0 same, 1 diverged, 0 skipped; 0 steps compared"
    exact = runner.invoke(cli_app, [*args, "--json"])
    assert exact.exit_code == 1, exact.output
    assert "\x1b" not in exact.output and len(exact.output.splitlines()) == 1
    d = json.loads(exact.output)["results"][0]["divergence"]
    assert d["changed"] == [f"edge {FORGED} -> done removed"]  # JSON escapes, exactly
    assert d["log"][0]["input"] == FORGED
