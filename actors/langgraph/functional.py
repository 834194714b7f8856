"""LangGraph's functional API: `@entrypoint` makes a function a graph of one node, and
`@task` makes a function a recorded call inside it.

A task's start and result are recorded in the log as a tool call's are (`tool_call_started`,
`tool_call_finished`), as its entrypoint's node runs: when the entrypoint runs again (after
an `interrupt()`, a crash or a failure) every task whose result committed answers from the
log instead of running again, so a side effect in a task happens once. Tasks are told apart
by their order of call within the step, so an entrypoint must call its tasks in the same
order each time it runs (LangGraph asks the same).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from typing_extensions import TypedDict

from agentlog.actors.engine.context import NodeContext, current_context
from agentlog.actors.engine.errors import GraphError, GraphInterrupt
from agentlog.actors.engine.graph import StateGraph as Builder
from agentlog.actors.engine.modes import StreamMode
from agentlog.actors.engine.redact import redact
from agentlog.actors.langgraph.compiled import INTERRUPT, CompiledStateGraph, refuse_options
from agentlog.actors.langgraph.graph import messages_out
from agentlog.actors.langgraph.nodes import Shapes, asks_for, extras
from agentlog.actors.langgraph.schema import schema_of
from agentlog.events.kinds import ToolCallFinished, ToolCallStarted
from agentlog.projections import END, START, AgentState, to_builtins
from agentlog.projections.ids import monotonic

V = TypeVar("V")
S = TypeVar("S")


class TaskError(GraphError):
    """A task was called outside an entrypoint, or returned what the log cannot keep."""


class _Entry(TypedDict):
    input: Any
    output: Any
    returned: Any


_runner: contextvars.ContextVar[_Runner | None] = contextvars.ContextVar(
    "agentlog_tasks", default=None
)


@dataclass
class _Runner:
    """The tasks of one entrypoint step: each call's id by its order, and the results the
    log already holds for this step (read back when the step runs again)."""

    context: NodeContext
    loop: asyncio.AbstractEventLoop
    finished: dict[str, ToolCallFinished] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, context: NodeContext) -> _Runner:
        runner = cls(context, asyncio.get_running_loop())
        for record in context.step_records:
            event = record.event
            if isinstance(event, ToolCallStarted):
                runner.started.add(event.call_id)
            elif isinstance(event, ToolCallFinished):
                runner.finished[event.call_id] = event
        return runner

    def next_id(self, name: str) -> str:
        with self.lock:
            self.calls += 1
            return f"task-{self.calls}-{name}"

    async def run(
        self, call_id: str, task: Task[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        attempt = 0
        while (done := self.finished.get(call_id)) is not None and done.status == "failed":
            attempt += 1  # failed before: this is a new attempt, recorded as a call of its own
            call_id = f"{call_id.split('.retry')[0]}.retry{attempt}"
        if done is not None:
            return done.output  # committed before: answered from the log, not run again
        context = self.context
        if call_id not in self.started:
            recorded = to_builtins({"args": list(args), "kwargs": kwargs})
            start = ToolCallStarted(
                call_id=call_id, name=task.name, args=recorded, node=context.node
            )
            await context.commit([start])
            self.started.add(call_id)
        context.dispatched.add(call_id)
        began = monotonic()
        try:
            if task.is_async:
                value = await task.fn(*args, **kwargs)
            else:
                value = await context.offload(f"task {task.name!r}", task.fn, *args, **kwargs)
        except GraphInterrupt:
            raise
        except Exception as exc:
            failed = ToolCallFinished(
                call_id=call_id,
                name=task.name,
                status="failed",
                error=redact(f"{type(exc).__name__}: {exc}"),
                duration_ms=(monotonic() - began) * 1000,
            )
            await context.commit([failed])
            raise
        try:
            output = to_builtins(value)
        except Exception as exc:
            raise TaskError(
                f"task {task.name!r} returned {type(value).__name__}, which the log cannot "
                f"keep ({exc}): return builtins (dict, list, str, numbers), or a model"
            ) from exc
        finished = ToolCallFinished(
            call_id=call_id,
            name=task.name,
            output=output,
            duration_ms=(monotonic() - began) * 1000,
        )
        await context.commit([finished])
        stream = context.stream
        projection = None if stream is None else stream.projection
        if stream is not None and projection is not None and projection.wants(StreamMode.UPDATES):
            await stream.tell(projection.part(StreamMode.UPDATES, {task.name: output}))
        return value


class TaskFuture(Generic[V]):
    """A task call under way: `.result()` from a `def` entrypoint, `await` from an async one."""

    def __init__(self, future: concurrent.futures.Future[V]) -> None:
        self._future = future

    def result(self, timeout: float | None = None) -> V:
        return self._future.result(timeout)

    def done(self) -> bool:
        return self._future.done()

    def __await__(self) -> Generator[Any, None, V]:
        return asyncio.wrap_future(self._future).__await__()


class Task(Generic[V]):
    """A function whose calls inside an entrypoint are recorded (see the module notes)."""

    def __init__(self, fn: Callable[..., V | Awaitable[V]], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", "task"))
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> TaskFuture[V]:
        runner = _runner.get()
        if runner is None:
            raise TaskError(
                f"task {self.name!r} was called outside an entrypoint: call it from a "
                "function decorated with @entrypoint(), while it runs"
            )
        call_id = runner.next_id(self.name)
        future = asyncio.run_coroutine_threadsafe(
            runner.run(call_id, self, args, kwargs), runner.loop
        )
        return TaskFuture(future)


def task(fn: Callable[..., Any] | None = None, *, name: str | None = None, **options: Any) -> Any:
    """`@task` (or `@task(name=...)`): the function's calls inside an entrypoint are recorded."""
    refuse_options("task()", options)
    if fn is None:
        return lambda f: Task(f, name)
    return Task(fn, name)


@dataclass(frozen=True)
class final(Generic[V, S]):
    """Return `value` to the caller and keep `save` as the thread's `previous`."""

    value: V
    save: S


class EntrypointGraph(CompiledStateGraph):
    """An entrypoint compiled: `invoke(input)` returns what the function returned; the
    state's values are what it saved (`previous` of the thread's next call)."""

    def shown(self, values: dict[str, Any]) -> Any:
        return values.get("output")

    def returned(self, values: dict[str, Any]) -> Any:
        if INTERRUPT in values:
            return {INTERRUPT: values[INTERRUPT]}
        return values.get("returned")

    def given(self, input: Any) -> Any:
        return {"input": input}

    def update_shown(self, update: dict[str, Any]) -> Any:
        return update.get("returned")


class entrypoint:
    """`@entrypoint(checkpointer=..., store=...)`: the function, a graph of one node."""

    final = final

    def __init__(self, checkpointer: Any = None, store: Any = None, **options: Any) -> None:
        refuse_options("entrypoint()", options)
        self.checkpointer = checkpointer
        self.store = store

    def __call__(self, fn: Callable[..., Any]) -> EntrypointGraph:
        name = str(getattr(fn, "__name__", "entrypoint"))
        schema = schema_of(_Entry)
        shapes = Shapes(schema, messages_out())
        wants = asks_for(name, fn, also=("previous",))
        is_async = inspect.iscoroutinefunction(fn)

        async def node(state: AgentState, config: Mapping[str, Any]) -> dict[str, Any]:
            context = current_context()
            runner = _Runner.of(context)
            given = extras([w for w in wants if w != "previous"], config)
            if "previous" in wants:
                given["previous"] = vars(state)["output"]
            value_in = vars(state)["input"]
            token = _runner.set(runner)
            try:
                if is_async:
                    value = await fn(value_in, **given)
                else:
                    value = await context.offload(f"entrypoint {name!r}", fn, value_in, **given)
            finally:
                _runner.reset(token)
            if isinstance(value, final):
                return {"output": to_builtins(value.save), "returned": to_builtins(value.value)}
            plain = to_builtins(value)
            return {"output": plain, "returned": plain}

        node.__name__ = name
        builder: Builder[Any] = Builder(schema.state_cls)
        builder.add_node(name, node)
        builder.add_edge(START, name)
        builder.add_edge(name, END)
        compiled = builder.compile(self.checkpointer, store=self.store)
        graph = EntrypointGraph(compiled, shapes, checkpointed=self.checkpointer is not None)
        functools.update_wrapper(graph, fn)  # type: ignore[arg-type]
        return graph
