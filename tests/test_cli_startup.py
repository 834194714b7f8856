"""`agentlog --help` starts without the state models or the engine; `agentlog threads`
without the engine.

What a command imports is checked, not how long it takes: each invocation runs in a fresh
interpreter that reports `sys.modules` (and who first imported pydantic) once it is done.
`threads` reads each thread's status with the library's fold, as `show` and the HTTP API do
(no second fold of its own): checked here on threads a real graph wrote, and against every
reader on random event sequences in `test_status_readers`.
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

from agentlog.actors import END, StateGraph
from agentlog.actors.engine.commit import fork_thread
from agentlog.events import (
    EventStore,
    Forked,
    SQLiteEventStore,
)
from agentlog.projections import AgentState, Message, ToolCallBlock, state_at
from tests.helpers import agent_with_tools

from .helpers import ROOT

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
    import agentlog.actors.cli
    imported = sorted(sys.modules)
    code = None
    if args:
        try:
            agentlog.actors.cli.main(args)
        except SystemExit as exc:
            code = exc.code
    with open(report, "w") as out:
        json.dump({"imported": imported, "ran": sorted(sys.modules), "code": code,
                   "pydantic_by": Watch.by}, out)
    """
)

LIGHT = {
    "agentlog",
    "agentlog.actors",
    "agentlog.actors.cli",
    "agentlog.actors.cli.render",
    "agentlog.actors.cli.replay_command",  # the command's options alone (typer)
    "agentlog.actors.cli.logs",
    "agentlog.actors.cli.otel",
    "agentlog.actors.cli.relay",  # the relay's options: typer alone
    "agentlog.actors.cli.keep",  # export, erase, prune: their options, the engine loaded late
    "agentlog.actors.cli.ui",  # the viewer's options: typer and the log alone
}
"""The project's modules besides `events` that the light commands may load."""


def probe(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Import `agentlog.actors.cli`, run `agentlog ARGS` in a fresh interpreter: what it loaded."""
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
    ours = ("agentlog.actors", "agentlog.projections")
    return [m for m in modules if m.startswith(ours) and m not in LIGHT]


async def _small_log(db: Path) -> None:
    """Two threads a real graph wrote: one completed, one paused before its tools."""
    async with SQLiteEventStore(db) as store:
        app = _agent().compile(checkpointer=store, interrupt_before=["tools"])
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
    assert "agentlog.projections.messages" not in found["imported"]


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


ENGINE = (
    "agentlog.actors.engine.compiled",
    "agentlog.actors.engine.steps",
    "agentlog.actors.runtime",
    "agentlog.actors.http",
)
"""Modules of the graph engine, the runtime and the server: no reading command needs them."""


def engine(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(ENGINE)]


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_threads_loads_no_engine(tmp_path: Path, small_log: Path, as_json: bool) -> None:
    found = probe(tmp_path, "threads", "--db", str(small_log), *(["--json"] if as_json else []))
    assert found["code"] == 0
    assert engine(found["ran"]) == []
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
        from agentlog import actors
        assert "agentlog.actors.engine.compiled" not in sys.modules
        assert "agentlog.projections" not in sys.modules
        assert set(actors.__all__) <= set(dir(actors))
        from agentlog.actors import StateGraph, ToolNode, Command, RemoveMessage
        from agentlog.actors import ResponseGranularity
        from agentlog.actors.engine.graph import StateGraph as home
        assert StateGraph is home and ToolNode.__module__ == "agentlog.actors.tools.node"
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
        exec("from agentlog.actors import *", namespace)
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
    from agentlog import actors

    assert set(actors.__all__) == set(actors._HOMES)
    for name in actors.__all__:
        assert getattr(actors, name) is not None


# ---- `threads` lists what the library folds ---------------------------------------------------


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


async def _library(store: EventStore, thread_id: str) -> tuple[str, str, int, str]:
    """The library's fold of the thread's four fields `agentlog threads` lists."""
    meta = (await state_at(store, thread_id)).execution_meta
    return meta.status.value, meta.stop_current_execution.value, meta.step, meta.current_node


async def _real_threads(db: Path) -> list[str]:
    """Threads a real graph wrote: completed after a pause, paused, failed, and forks."""

    def boom(state: AgentState) -> None:
        raise RuntimeError("the node broke")

    async with SQLiteEventStore(db) as store:
        app = _agent().compile(checkpointer=store, interrupt_before=["tools"])
        await app.ainvoke({"messages": [Message.text_message("weather?")]}, {"thread_id": "done"})
        await app.ainvoke(None, {"thread_id": "done"})
        await app.ainvoke({"messages": [Message.text_message("weather?")]}, {"thread_id": "paused"})
        failing: StateGraph[AgentState] = StateGraph(AgentState)
        failing.add_node("boom", boom)
        failing.set_entry_point("boom")
        failing.add_edge("boom", END)
        with pytest.raises(Exception, match="the node broke"):
            await failing.compile(checkpointer=store).ainvoke(
                {"messages": [Message.text_message("go")]}, {"thread_id": "failed"}
            )
        for seq in (2, await store.last_seq("done") - 1):
            await fork_thread(
                store, "done", at_seq=seq, new_thread_id=f"fork-{seq}", state_cls=AgentState
            )
        return await store.threads()


def test_threads_lists_what_the_library_folds_for_real_threads(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    threads = asyncio.run(_real_threads(db))
    assert len(threads) == 5

    async def folded() -> dict[str, tuple[str, str, int, str]]:
        async with SQLiteEventStore(db, readonly=True) as store:
            return {t: await _library(store, t) for t in threads}

    library = asyncio.run(folded())
    assert {library[t][0] for t in threads} >= {"completed", "interrupted_before", "error"}

    found = probe(tmp_path, "threads", "--db", str(db), "--json")
    assert engine(found["ran"]) == []
    for line in json.loads(found["stdout"]):
        status, stop, step, node = library[line["thread_id"]]
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
    assert line["error"] == "unreadable: UnfoldableRecordError"
