"""One thread of a graph under test, as the graph state machine drives it: a store that can
crash or pause, the app the user's factory builds on it, and what each call came to."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentlog.actors.testing.checks import reopen_after_crash
from agentlog.actors.testing.doubles import FakeClock, RecordingTool, recording_tools
from agentlog.actors.testing.faults import FaultyStore, SimulatedCrashError, When
from agentlog.events import EventStore, MemoryEventStore, SQLiteEventStore
from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import ENDING_KINDS, ToolCallFinished
from agentlog.projections import AgentState, replay

if TYPE_CHECKING:
    from agentlog.actors.engine.compiled import CompiledGraph

Factory = Callable[[EventStore], "CompiledGraph[Any]"]
"""What the machine calls to build the app under test on a store (again after every crash)."""

StoreKind = Literal["memory", "sqlite"]


@dataclass(frozen=True)
class Outcome:
    """What a call came to: a status, or a typed error (its class name), and the state."""

    result: str
    state: AgentState | None = None

    @property
    def failed(self) -> bool:
        return self.result.startswith("error:")


@dataclass
class Incarnation:
    """One life of the app: what the factory built, and the tools it made."""

    app: CompiledGraph[Any]
    store: FaultyStore
    tools: list[RecordingTool]
    finished_before: frozenset[str]
    """Tool calls whose results were committed before this life began: never run again."""


@dataclass
class Lane:
    """A thread of the graph under test on a store of its own."""

    factory: Factory
    kind: StoreKind
    clock: FakeClock
    thread_id: str = "t"
    directory: tempfile.TemporaryDirectory[str] | None = None
    inner: EventStore = field(init=False)
    life: Incarnation = field(init=False)
    lives: list[Incarnation] = field(default_factory=list)
    crashes: int = 0
    recovery: Literal["retried", "ended", "resumed"] | None = None
    """After the last crash: what the caller did (retry the call, nothing, resume)."""
    uncrashed: Outcome | None = None
    """What the last call meant to crash came to when it ended before the chosen commit."""
    spawns: int = 0
    """Child processes started (each seeds its ids apart from the others')."""

    def __post_init__(self) -> None:
        if self.kind == "sqlite":
            self.directory = tempfile.TemporaryDirectory(prefix="agentlog-machine-")
        self.inner = self._open()

    @property
    def path(self) -> Path:
        assert self.directory is not None
        return Path(self.directory.name) / "log.db"

    def _open(self) -> EventStore:
        if self.kind == "sqlite":
            return SQLiteEventStore(self.path, clock=self.clock)
        return MemoryEventStore(clock=self.clock)

    @property
    def config(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id}

    @property
    def app(self) -> CompiledGraph[Any]:
        return self.life.app

    async def begin(self) -> None:
        """Build the app (a first life, or a new one after a crash)."""
        finished = await self.finished_calls() if self.lives else frozenset()
        faulty = FaultyStore(self.inner, self.thread_id)
        with recording_tools() as tools:
            app = self.factory(faulty)
        if getattr(app, "store", None) is not faulty:
            raise TypeError(
                f"the factory {_name(self.factory)} must compile the graph on the store it is "
                "given (graph.compile(store)), so the machine can crash and reopen it"
            )
        self.life = Incarnation(app, faulty, tools, finished)
        self.lives.append(self.life)

    async def finished_calls(self) -> frozenset[str]:
        """The ids of every tool call whose result is in the thread's log."""
        done: set[str] = set()
        for thread in await self.inner.threads():
            async for record in self.inner.read(thread):
                if isinstance(record.event, ToolCallFinished):
                    done.add(record.event.call_id)
        return frozenset(done)

    async def records(self) -> list[Any]:
        if await self.inner.last_seq(self.thread_id) == 0:
            return []
        return [r async for r in self.inner.read(self.thread_id)]

    async def state(self) -> AgentState | None:
        """The thread's state replayed from the log, None before its first record."""
        records = await self.records()
        return replay(records, self.app.graph.state_cls) if records else None

    async def call(self, input: Any) -> Outcome:
        """`ainvoke` the thread; a typed failure is an outcome, anything else a bug."""
        try:
            result = await self.app.ainvoke(input, self.config, include_state=True)
        except AgentlogError as exc:
            return Outcome(f"error:{type(exc).__name__}", await self.state())
        state: AgentState = result["state"]
        return Outcome(state.execution_meta.status.value, state)

    async def edit(self, values: dict[str, Any], as_node: str | None) -> Outcome:
        try:
            await self.app.aupdate_state(self.config, values, as_node=as_node)
        except AgentlogError as exc:
            return Outcome(f"error:{type(exc).__name__}", await self.state())
        return Outcome("edited", await self.state())

    async def crash_during(self, input: Any, commit: int, when: When) -> Outcome | None:
        """Run `input`, crashing at the chosen commit; after a crash, reopen and recover as a
        restarted process would. None when the run ended before that commit."""
        before = await self.inner.last_seq(self.thread_id)
        self.life.store.crash_at(commit, when)
        outcome = await self.call(input)
        faulty = self.life.store
        if not faulty.crashed:
            faulty.disarm()
            self.uncrashed = outcome
            return None
        await self.reopen()
        return await self._recover(input, before)

    async def kill_during(self, spec: str, input: Any, commit: int, when: When) -> Outcome | None:
        """`crash_during` with a real death: the call runs in a child process (the factory
        imported by `spec`, "module:attribute") that SIGKILLs itself at the chosen commit."""
        from agentlog.actors.engine.command import Command

        before = await self.inner.last_seq(self.thread_id)
        call = {"resume": input.resume} if isinstance(input, Command) else {"input": input}
        try:
            text = json.dumps(call)
        except TypeError as exc:
            raise TypeError(
                f"a sigkill crash hands the call to a child process as JSON; {input!r} is not "
                "JSON: draw plain text or dicts as inputs, or use in-process crashes"
            ) from exc
        await self.inner.close()
        self.spawns += 1
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentlog.actors.testing.crashrun", spec, str(self.path),
            self.thread_id, str(commit), when, text, repr(self.clock.now), str(2**40 + self.spawns),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        out, err = await child.communicate()
        self.inner = self._open()
        if child.returncode == -signal.SIGKILL:
            self.crashes += 1
            await self.begin()
            return await self._recover(input, before)
        if child.returncode != 0:
            raise RuntimeError(
                f"the crash child for {spec} failed (exit {child.returncode}): "
                f"{err.decode(errors='replace')[-2000:]}"
            )
        await self.begin()
        said = out.decode(errors="replace").strip().splitlines() or [""]
        self.uncrashed = Outcome(said[-1], await self.state())  # its last line: the status
        return None

    async def _recover(self, input: Any, before: int) -> Outcome:
        """After a reopen: retry a call nothing of which was recorded, leave alone a run
        whose end (completion, failure, a pause) was committed, and resume any other."""
        if await self.inner.last_seq(self.thread_id) == before:
            self.recovery = "retried"
            return await self.call(input)  # nothing of it was recorded: the caller retries
        kinds = {r.kind async for r in self.inner.read(self.thread_id, before + 1)}
        if kinds & ENDING_KINDS:  # a crash after a run ended left nothing to resume
            self.recovery = "ended"
            state = await self.state()
            assert state is not None
            return Outcome(state.execution_meta.status.value, state)
        self.recovery = "resumed"
        return await self.call(None)

    async def reopen(self) -> None:
        """What a restart after a crash does: the dead engine's claims go, the store is
        opened afresh from its files (the same memory for a memory store), the app rebuilt."""
        self.crashes += 1
        reopen = self._open if self.kind == "sqlite" else None
        self.inner = await reopen_after_crash(self.life.store, reopen)
        await self.begin()

    async def close(self) -> None:
        for life in self.lives:
            life.app.close()
        with contextlib.suppress(AgentlogError):
            await self.inner.close()
        if self.directory is not None:
            self.directory.cleanup()


def _name(factory: Callable[..., Any]) -> str:
    return getattr(factory, "__qualname__", None) or repr(factory)


__all__ = [
    "Factory",
    "Incarnation",
    "Lane",
    "Outcome",
    "SimulatedCrashError",
    "StoreKind",
]
