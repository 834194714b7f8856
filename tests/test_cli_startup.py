"""`agentlog --help` and `agentlog threads` start without the state models or the engine.

What a command imports is checked, not how long it takes: each invocation runs in a fresh
interpreter that reports `sys.modules` (and who first imported pydantic) once it is done.
`threads` reads each thread's status from its lifecycle events (`actors.cli.Lifecycle`)
instead of folding the whole state; that fold is checked against the library's, on random
event sequences and on threads a real graph wrote.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import END, StateGraph
from actors.cli import Lifecycle
from events import (
    Event,
    EventStore,
    Forked,
    InterruptRaised,
    MemoryEventStore,
    NodeEntered,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    SQLiteEventStore,
    StepAdvanced,
    Stopped,
    StopRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from projections import AgentState, ExecutionState, Message, ToolCallBlock, fork, state_at
from tests.helpers import agent_with_tools

from .helpers import ROOT, text_event

# ---- what a command imports ------------------------------------------------------------------

_PROBE = textwrap.dedent(
    """
    import json, sys

    class Watch:
        '''Notes the module whose code first imports pydantic; finds nothing itself.'''

        by = None

        def find_spec(self, name, path=None, target=None):
            if name == "pydantic" and Watch.by is None:
                frame = sys._getframe(1)
                while frame is not None and frame.f_globals.get("__name__", "").startswith(
                    ("importlib", "_frozen_importlib")
                ):
                    frame = frame.f_back
                Watch.by = frame.f_globals.get("__name__") if frame is not None else "?"
            return None

    sys.meta_path.insert(0, Watch())
    report, args = sys.argv[1], sys.argv[2:]
    import actors.cli

    imported = sorted(sys.modules)
    code = None
    if args:
        try:
            actors.cli.main(args)
        except SystemExit as exc:
            code = exc.code
    with open(report, "w") as out:
        json.dump({"imported": imported, "ran": sorted(sys.modules), "code": code,
                   "pydantic_by": Watch.by}, out)
    """
)

LIGHT = {"actors", "actors.cli", "actors.cli.render"}
"""The project's modules besides `events` that the light commands may load."""


def probe(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Import `actors.cli` and run `agentlog ARGS` in a fresh interpreter; what it loaded."""
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(report), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "120"},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(report.read_text())
    result["stdout"] = done.stdout
    return result


def heavy(modules: list[str]) -> list[str]:
    """The loaded modules of the project that a light command must not need."""
    return [m for m in modules if m.split(".")[0] in ("actors", "projections") and m not in LIGHT]


async def _small_log(db: Path) -> None:
    """Two threads a real graph wrote: one completed, one paused before its tools."""
    async with SQLiteEventStore(db) as store:
        app = _agent().compile(store=store, interrupt_before=["tools"])
        await app.ainvoke({"messages": [Message.text_message("weather?")]}, {"thread_id": "a"})
        await app.ainvoke(None, {"thread_id": "a"})
        await app.ainvoke({"messages": [Message.text_message("again?")]}, {"thread_id": "b"})


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("startup") / "log.db"
    asyncio.run(_small_log(db))
    return db


def test_importing_the_command_line_loads_no_models_no_engine_no_pydantic(
    tmp_path: Path,
) -> None:
    found = probe(tmp_path)
    assert heavy(found["imported"]) == []
    assert "pydantic" not in found["imported"]
    assert "projections.messages" not in found["imported"]


@pytest.mark.parametrize(
    "args",
    [["--help"], ["threads", "--help"], ["show", "--help"], ["verify", "--help"]],
    ids=" ".join,
)
def test_help_loads_no_models_and_no_engine(tmp_path: Path, args: list[str]) -> None:
    found = probe(tmp_path, *args)
    assert found["code"] == 0
    assert "Usage" in found["stdout"]
    assert heavy(found["ran"]) == [], args
    # pydantic, if at all, only for typer's own parameter validation (typer._adapters).
    assert found["pydantic_by"] in (None, "typer._adapters"), found["pydantic_by"]
    if args == ["--help"]:
        assert "pydantic" not in found["ran"]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_threads_loads_no_models_and_no_engine(
    tmp_path: Path, small_log: Path, as_json: bool
) -> None:
    found = probe(tmp_path, "threads", "--db", str(small_log), *(["--json"] if as_json else []))
    assert found["code"] == 0
    assert heavy(found["ran"]) == []
    assert "projections.messages" not in found["ran"] and "actors.compiled" not in found["ran"]
    assert found["pydantic_by"] in (None, "typer._adapters"), found["pydantic_by"]
    if as_json:
        listed = {t["thread_id"]: t for t in json.loads(found["stdout"])}
        assert listed["a"]["status"] == "completed" and listed["a"]["node"] == END
        assert listed["b"]["status"] == "interrupted_before" and listed["b"]["node"] == "tools"
    else:
        assert "2 threads" in found["stdout"] and "interrupted_before" in found["stdout"]


def test_the_runtime_names_load_on_first_use(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import importlib, sys
        import actors
        assert "actors.compiled" not in sys.modules and "projections" not in sys.modules
        assert set(actors.__all__) <= set(dir(actors))
        from actors import StateGraph, ToolNode, Command, RemoveMessage, ResponseGranularity
        from actors.graph import StateGraph as home
        assert StateGraph is home and ToolNode.__module__ == "actors.tools"
        for name in actors.__all__:
            value = getattr(actors, name)
            module = importlib.import_module(actors._HOMES[name])
            assert value is getattr(module, name), name
        try:
            actors.no_such_name
        except AttributeError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError("an unknown name resolved")
        namespace = {}
        exec("from actors import *", namespace)
        assert set(actors.__all__) <= set(namespace)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_every_public_name_is_mapped_to_where_it_lives() -> None:
    import actors

    assert set(actors.__all__) == set(actors._HOMES)
    for name in actors.__all__:
        assert getattr(actors, name) is not None


# ---- the lifecycle fold agrees with the library's --------------------------------------------


def _agent() -> StateGraph[AgentState]:
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city.
        """
        return f"sunny in {city}"

    def agent(state: AgentState) -> list[Message]:
        if state.context[-1].role == "tool":
            return [Message.text_message("sunny", role="assistant")]
        call = ToolCallBlock(id=f"c{len(state.context)}", name="get_weather", args={"city": "Oslo"})
        return [Message(role="assistant", content=[call])]

    return agent_with_tools(agent, [get_weather])  # type: ignore[no-any-return]


def _expected(meta: ExecutionState) -> tuple[str, str, int, str]:
    return meta.status.value, meta.stop_current_execution.value, meta.step, meta.current_node


async def _both(store: EventStore, thread_id: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The lifecycle fold's four fields and the library's, for the thread's last record."""
    run = Lifecycle()
    async for record in store.read(thread_id):
        run.apply(record.event)
    state: AgentState = await state_at(store, thread_id)
    return (run.status, run.stop, run.step, run.node), _expected(state.execution_meta)


nodes = st.sampled_from(["agent", "tools", "__start__", "__end__", "a\u202eb"])
whens = st.sampled_from(["before", "after"])
metas = st.fixed_dictionaries(
    {"current_node": nodes},
    optional={
        "step": st.integers(0, 50),
        "status": st.sampled_from(
            ["running", "interrupted_before", "interrupted_after", "completed", "error"]
        ),
        "stop_current_execution": st.sampled_from(["none", "stop_requested", "stopped"]),
    },
)
lifecycle_events: st.SearchStrategy[Event] = st.one_of(
    st.builds(RunStarted, entry_node=nodes),
    st.builds(NodeEntered, node=nodes),
    st.builds(StepAdvanced, step=st.integers(0, 9), next_node=st.none() | nodes),
    st.builds(InterruptRaised, node=nodes, reason=st.just("r"), when=whens, by_node=st.booleans()),
    st.builds(Resumed, value=st.none() | st.integers(-1000, 1000)),
    st.builds(StopRequested, by=st.none() | st.just("ops")),
    st.builds(Stopped, node=st.none() | nodes, when=whens, in_flight=st.just(["c1"])),
    st.builds(RunCompleted),
    st.builds(RunFailed, node=st.none() | nodes, error_type=st.just("E"), message=st.just("m")),
    st.builds(
        Forked,
        source_thread=st.just("src"),
        source_seq=st.integers(1, 9),
        state=st.just({}) | metas.map(lambda m: {"execution_meta": m}),
    ),
    st.builds(ToolCallStarted, call_id=st.sampled_from(["c1", "c2"]), name=st.just("f")),
    st.builds(ToolCallFinished, call_id=st.sampled_from(["c1", "c2"]), name=st.just("f")),
    st.builds(text_event, st.sampled_from(["hi", "there"])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(lifecycle_events, min_size=1, max_size=30))
def test_the_lifecycle_fold_equals_the_state_fold(events: list[Event]) -> None:
    async def main() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        store = MemoryEventStore()
        await store.append("t", events, expected_seq=0)
        return await _both(store, "t")

    mine, library = asyncio.run(main())
    assert mine == library


async def _real_threads(db: Path) -> list[str]:
    """Threads a real graph wrote: completed after a pause, paused, failed, and forks."""

    def boom(state: AgentState) -> None:
        raise RuntimeError("the node broke")

    async with SQLiteEventStore(db) as store:
        app = _agent().compile(store=store, interrupt_before=["tools"])
        await app.ainvoke({"messages": [Message.text_message("weather?")]}, {"thread_id": "done"})
        await app.ainvoke(None, {"thread_id": "done"})
        await app.ainvoke({"messages": [Message.text_message("weather?")]}, {"thread_id": "paused"})
        failing: StateGraph[AgentState] = StateGraph(AgentState)
        failing.add_node("boom", boom)
        failing.set_entry_point("boom")
        failing.add_edge("boom", END)
        with pytest.raises(Exception, match="the node broke"):
            await failing.compile(store=store).ainvoke(
                {"messages": [Message.text_message("go")]}, {"thread_id": "failed"}
            )
        for seq in (2, await store.last_seq("done") - 1):
            await fork(store, "done", at_seq=seq, new_thread_id=f"fork-{seq}")
        return await store.threads()


def test_threads_lists_what_the_library_folds_for_real_threads(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    threads = asyncio.run(_real_threads(db))
    assert len(threads) == 5

    async def folded() -> dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]]:
        async with SQLiteEventStore(db, readonly=True) as store:
            return {t: await _both(store, t) for t in threads}

    pairs = asyncio.run(folded())
    for thread_id, (mine, library) in pairs.items():
        assert mine == library, thread_id
    assert {pairs[t][1][0] for t in threads} >= {"completed", "interrupted_before", "error"}

    found = probe(tmp_path, "threads", "--db", str(db), "--json")
    assert heavy(found["ran"]) == []
    for line in json.loads(found["stdout"]):
        status, stop, step, node = pairs[line["thread_id"]][1]
        assert line["error"] is None
        assert (line["status"], line["stop"] or "none", line["step"], line["node"]) == (
            status,
            stop,
            step,
            node,
        )


def test_a_fork_without_a_readable_execution_state_lists_as_unreadable(tmp_path: Path) -> None:
    db = tmp_path / "log.db"

    async def write() -> None:
        async with SQLiteEventStore(db) as store:
            bad = Forked(source_thread="s", source_seq=1, state={"execution_meta": ["running"]})
            await store.append("odd", [bad], expected_seq=0)

    asyncio.run(write())
    found = probe(tmp_path, "threads", "--db", str(db), "--json")
    (line,) = json.loads(found["stdout"])
    assert line["thread_id"] == "odd" and line["status"] is None
    assert line["error"] == "unreadable: ForkStateError"
