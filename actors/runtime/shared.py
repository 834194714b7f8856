"""State shared between the runs of a runtime (the seed's isolation levels), kept in the log.

An entry point's `isolation` says what its runs may do with shared keys:

- `isolated` (the default): nothing; a run sees only its own thread.
- `shared`: writes are operations (set, increment, append, merge) recorded in the writing
  step's own commit, so they happen exactly when the step does; they apply in commit order,
  and a `set` meets the last one committed (last write wins).
- `synchronized`: a write is applied at once on the key's own thread, serialised by the
  store's optimistic concurrency (a writer that loses the race reads again and retries), and
  returns the key's new value: 100 concurrent increments hand out 1..100, each once.

Keys are namespaced by graph (`graph/key`) unless `RuntimeConfig.global_keys` names them
(`*/key`). Every write is a `shared_written` record (who, which run, which operation), so
the values can be recomputed as of any position. A run that reads shared keys may see other
values after a crash and resume than it would have without one: reads are not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentlog.actors.engine.commit import commit
from agentlog.actors.engine.context import NodeContext, current_context
from agentlog.actors.runtime.facts import SharedStateError, apply_op
from agentlog.actors.runtime.spec import SHARED_THREAD_PREFIX
from agentlog.events import EventRecord
from agentlog.events.kinds import Event, SharedWritten
from agentlog.projections.edge import to_builtins

if TYPE_CHECKING:
    from agentlog.actors.runtime.runtime import AgentRuntime
    from agentlog.actors.runtime.spec import EntryPoint

Op = Literal["set", "increment", "append", "merge"]


def _check_value(key: str, op: str, value: Any) -> Any:
    if not isinstance(key, str) or not key or "/" in key:
        raise SharedStateError(f"a shared key is a non-empty string without '/', got {key!r}")
    if op == "increment" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise SharedStateError(f"increment takes a number, got {value!r}")
    if op == "merge" and not isinstance(value, Mapping):
        raise SharedStateError(f"merge takes a dict, got {type(value).__name__}")
    try:
        return to_builtins(dict(value) if op == "merge" else value)
    except (TypeError, ValueError) as exc:
        raise SharedStateError(
            f"a shared value is recorded in the log: {type(value).__name__} cannot be ({exc})"
        ) from exc


@dataclass
class RunScope:
    """What a run started by the runtime carries into its nodes: whose run it is, and under
    `shared` isolation its own writes, so its nodes read them (read your writes)."""

    runtime: AgentRuntime
    entry: EntryPoint
    loop: asyncio.AbstractEventLoop
    base: dict[str, Any] = field(default_factory=dict)
    """Each key this run wrote: its value as read before the run's writes not folded in."""
    ops: list[tuple[NodeContext, str, Op, Any]] = field(default_factory=list)
    """The run's `shared` writes since its `base`: (the node's context, key, op, value)."""

    def visible(self, key: str, default: Any = None) -> Any:
        """The key's value as this run sees it: as read, with the run's writes that have
        committed (earlier steps) or are this node's own, pending in its step, applied. A
        parallel branch not yet committed and a failed attempt of a step that was tried
        again (seen by the retry's own writes) are left out: their writes may never land."""
        values = self.runtime.facts.values
        if key not in self.base:
            return values.get(key, default)
        value, here, seen = self.base[key], current_context(), key in values
        latest: dict[tuple[int, str, int | None], NodeContext] = {}  # each step's last try
        for context in [*(o[0] for o in self.ops), here]:  # oldest first
            latest[(context.step, context.node, context.branch)] = context
        for context, written, op, operand in self.ops:
            if written != key or (
                context is not here
                and (
                    context.step_seq >= here.step_seq  # a branch beside this one: not committed
                    or latest[(context.step, context.node, context.branch)] is not context
                )
            ):  # an attempt that failed and was tried again: it never committed
                continue
            with contextlib.suppress(SharedStateError):  # inert in the fold too
                value, seen = apply_op(value, op, operand, key), True
        return value if seen else default

    def wrote(self, key: str, op: Op, value: Any) -> None:
        if key not in self.base:
            self.base[key] = self.runtime.facts.values.get(key)
        self.ops.append((current_context(), key, op, value))

    def refreshed(self, key: str) -> None:
        """The facts now fold every commit: the key's committed writes are in them; only
        this node's pending ones stay on top."""
        if key not in self.base:
            return
        here = current_context()
        self.base[key] = self.runtime.facts.values.get(key)
        self.ops = [o for o in self.ops if o[1] != key or o[0] is here]


_scope: ContextVar[RunScope | None] = ContextVar("agentlog_run_scope", default=None)


def shared_state() -> SharedState:
    """The shared keys of the runtime running this node (call it inside a node)."""
    scope = _scope.get()
    context = current_context()
    if scope is None:
        raise SharedStateError(
            f"node {context.node!r} runs outside an agent runtime: shared keys belong to "
            "runs an AgentRuntime starts"
        )
    return SharedState(scope, context.node, context.thread_id, context.run_id, context.step_seq)


class SharedState:
    """A node's handle on the shared keys: read them, and write them as its entry point's
    isolation allows. `get` is the value as this process last read the log (`aget` reads up
    to its head first); writes of a `shared` entry point land with the node's step."""

    def __init__(
        self, scope: RunScope, node: str, thread_id: str, run_id: str, step_seq: int
    ) -> None:
        self.scope, self.node, self.thread_id, self.run_id = scope, node, thread_id, run_id
        self.step_seq = step_seq
        self._writes = 0

    @property
    def isolation(self) -> str:
        return self.scope.entry.isolation

    def get(self, key: str, default: Any = None) -> Any:
        """The key's value as last read from the log (at the run's start at the latest),
        with this run's own writes (an earlier node's, this node's) applied."""
        full = self.scope.runtime.shared_key(self.scope.entry.graph_id, key)
        self._check_readable(key)
        return self.scope.visible(full, default)

    async def aget(self, key: str, default: Any = None) -> Any:
        """The key's value with every commit so far folded in (and this node's own
        writes, which land with its step)."""
        self._check_readable(key)
        await self.scope.runtime.catch_up()
        self.scope.refreshed(self.scope.runtime.shared_key(self.scope.entry.graph_id, key))
        return self.get(key, default)

    def set(self, key: str, value: Any) -> Any:
        return self._write(key, "set", value)

    def increment(self, key: str, by: float = 1) -> Any:
        return self._write(key, "increment", by)

    def append(self, key: str, value: Any) -> Any:
        return self._write(key, "append", value)

    def merge(self, key: str, value: Mapping[str, Any]) -> Any:
        return self._write(key, "merge", value)

    async def aset(self, key: str, value: Any) -> Any:
        return await self._awrite(key, "set", value)

    async def aincrement(self, key: str, by: float = 1) -> Any:
        return await self._awrite(key, "increment", by)

    async def aappend(self, key: str, value: Any) -> Any:
        return await self._awrite(key, "append", value)

    async def amerge(self, key: str, value: Mapping[str, Any]) -> Any:
        return await self._awrite(key, "merge", value)

    # ---- writing ------------------------------------------------------------------------

    def _check_readable(self, key: str) -> None:
        if self.isolation == "isolated":
            raise SharedStateError(
                f"entry point {self.scope.entry.id!r} is isolated: its runs see only their "
                f"thread (key {key!r}); register it with isolation='shared' or 'synchronized'"
            )

    def _event(self, key: str, op: Op, value: Any) -> SharedWritten:
        self._check_readable(key)
        recorded = _check_value(key, op, value)
        full = self.scope.runtime.shared_key(self.scope.entry.graph_id, key)
        synchronized = self.isolation == "synchronized"
        if not synchronized:
            # refused now when the value as last read cannot take it (a string incremented),
            # rather than recorded and left inert by the fold with nobody told
            apply_op(self.scope.visible(full), op, recorded, key)
        self._writes += 1
        return SharedWritten(
            key=full,
            op=op,
            value=recorded,
            node=self.node,
            isolation="synchronized" if synchronized else "shared",
            run_id=self.run_id,
            op_id=f"{self.thread_id}:{self.step_seq}:{self._writes}" if synchronized else None,
        )

    def _write(self, key: str, op: Op, value: Any) -> Any:
        event = self._event(key, op, value)
        if event.isolation == "shared":
            current_context().record(event)
            self.scope.wrote(event.key, op, event.value)
            return None
        loop = self.scope.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise SharedStateError(
                f"a synchronized write waits for its commit: in an async node write "
                f"`await shared.a{op}({key!r}, ...)`"
            )
        future = asyncio.run_coroutine_threadsafe(self._commit(event), loop)
        return future.result()

    async def _awrite(self, key: str, op: Op, value: Any) -> Any:
        event = self._event(key, op, value)
        if event.isolation == "shared":
            current_context().record(event)
            self.scope.wrote(event.key, op, event.value)
            return None
        return await self._commit(event)

    async def _commit(self, event: SharedWritten) -> Any:
        """Append a synchronized write on the key's thread through the commit path (a lost
        race reads again and retries); the key's value after it (a write applied before, by
        this step's earlier life, is not redone)."""
        runtime = self.scope.runtime
        await commit(
            _SharedWrite(runtime, event, self.run_id, self.node),
            thread_id=SHARED_THREAD_PREFIX + event.key,
            what=f"a synchronized {event.op} of {event.key!r}",
        )
        return runtime.facts.applied.get(event.op_id or "")


class _SharedWrite:
    """A synchronized write's side of a commit: the runtime's facts are its fold."""

    def __init__(self, runtime: AgentRuntime, event: SharedWritten, run_id: str, node: str):
        self.runtime, self.event, self.run_id, self.node = runtime, event, run_id, node
        self.thread_id = SHARED_THREAD_PREFIX + event.key

    async def base(self) -> int:
        await self.runtime.catch_up()
        return await self.runtime.store.last_seq(self.thread_id)

    async def build(self, base: int) -> list[Event]:
        event, facts = self.event, self.runtime.facts
        if event.op_id in facts.applied:
            return []  # applied before, by this step's earlier life
        apply_op(facts.values.get(event.key), event.op, event.value, event.key)
        return [event]

    async def append(self, events: Sequence[Event], base: int) -> list[EventRecord]:
        return await self.runtime.store.append(
            self.thread_id, events, expected_seq=base, run_id=self.run_id, actor=self.node
        )

    async def landed(self, records: list[EventRecord]) -> None:
        await self.runtime.catch_up()

    async def lost(self, base: int) -> None:
        return None  # the next attempt catches up first

    async def failed(self) -> None:
        return None
