"""Background tasks (the seed architecture's background task manager): work a node starts
that goes on after the node, and the run, have returned.

A node asks for it through the `task_manager` it is handed:

    async def notify(state, task_manager):
        await task_manager.create_task(send_receipt, state.order_id)

`send_receipt` is one of the graph's tasks (`graph.add_task(send_receipt)`): a task is named
in the log, so that a process that died while it ran can start it again, and so that a name
read back from the log only ever reaches a function the graph declared. Its arguments are
stored as builtins, refused before anything is written when they cannot be.

Each task is recorded on the task thread of the run's thread (`__tasks__/<thread>`), through
the one commit path, as the call it is: `tool_call_started` (its name, and its arguments as
`{"args": [...], "kwargs": {...}}`) before it begins, `tool_call_finished` (completed with
its output, failed with its error, or abandoned when cancelled) when it ends; the fold's
gate refuses a second outcome. A task whose outcome committed
never runs again: the step that started it, run again after a crash, finds its id (thread,
step, place in the step) recorded and finished. A task in flight when its process died has
a start and no outcome: `recover(thread_id)` starts it again, and so does the first call
that runs the thread in a process (at least once, as a tool call: it may have done its work
before the process died, so a task should be safe to repeat).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentlog.actors.engine.commit import write
from agentlog.actors.engine.context import current_context
from agentlog.actors.engine.errors import GraphError
from agentlog.actors.engine.redact import redact
from agentlog.actors.engine.threads import TASKS_THREAD_PREFIX
from agentlog.events import EventStore
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.kinds import Event, ToolCallFinished, ToolCallStarted
from agentlog.projections import AgentState, to_builtins
from agentlog.projections.ids import monotonic

TaskFn = Callable[..., Awaitable[Any]]

_COUNTED_STEPS = 4096
"""How many recent steps the manager remembers the task count of (to number their tasks)."""


class TaskNotRegisteredError(GraphError):
    """A node started a background task the graph never declared (`graph.add_task(fn)`)."""


def tasks_thread(thread_id: str) -> str:
    """The thread recording the background tasks started by the runs of `thread_id`."""
    return TASKS_THREAD_PREFIX + thread_id


def task_name(fn: Callable[..., Any], name: str | None = None) -> str:
    """The name a task is recorded under: `name`, else the function's own; refused for a
    function that is not async (a task runs on the event loop, beside the runs)."""
    if not inspect.iscoroutinefunction(fn):
        raise GraphError(f"a background task must be an async function (async def), got {fn!r:.60}")
    return name or fn.__name__


class BackgroundTaskManager:
    """The background tasks of one compiled graph: started by its nodes, tracked while they
    run in this process, cancellable, and recorded in the log (see the module's notes)."""

    def __init__(self, store: EventStore, tasks: Mapping[str, TaskFn]) -> None:
        self.store = store
        self.tasks = dict(tasks)
        self.running: dict[str, asyncio.Task[Any]] = {}
        """The tasks running in this process, by task id."""
        self._counts: dict[tuple[str, int], int] = {}
        self._recovered: set[str] = set()
        """The threads whose killed tasks this process has started again."""

    async def create_task(self, fn: TaskFn | str, /, *args: Any, **kwargs: Any) -> str:
        """Start the graph's task `fn` (the function, or its name) with `args` and `kwargs`
        from the running node; its task id, once its start is recorded. A step run again
        after a crash gets the same id: a task that finished is not started again, one that
        never did is."""
        context = current_context()
        name = fn if isinstance(fn, str) else task_name(fn)
        if name not in self.tasks or (not isinstance(fn, str) and self.tasks[name] is not fn):
            known = ", ".join(sorted(self.tasks)) or "none"
            raise TaskNotRegisteredError(
                f"{name!r} is not one of the graph's background tasks (known: {known}): "
                f"declare it with graph.add_task({name})"
            )
        try:
            stored = {"args": to_builtins(list(args)), "kwargs": to_builtins(dict(kwargs))}
        except ValueError as exc:
            raise InvalidArgumentError(
                f"the arguments of background task {name!r} cannot be stored in the log "
                f"({exc}): pass builtins, models or dataclasses, and build the rest in the task"
            ) from None
        key = (context.thread_id, context.step_seq)
        place = self._counts.pop(key, 0)
        self._counts[key] = place + 1
        while len(self._counts) > _COUNTED_STEPS:
            del self._counts[next(iter(self._counts))]
        task_id = f"{context.thread_id}:{context.step_seq}:{place}"
        if task_id in self.running:
            return task_id
        _, finished = await self._records(context.thread_id)
        if task_id not in finished:  # finished: its outcome is in the log, it never runs again
            start = ToolCallStarted(call_id=task_id, name=name, args=stored, node=context.node)
            await self._write(context.thread_id, start)
            self._begin(context.thread_id, start)
        return task_id

    def _begin(self, thread_id: str, started: ToolCallStarted) -> None:
        task = asyncio.get_running_loop().create_task(
            self._run(thread_id, started), name=f"agentlog-task:{started.call_id}"
        )
        self.running[started.call_id] = task
        task.add_done_callback(lambda _: self.running.pop(started.call_id, None))

    async def _run(self, thread_id: str, started: ToolCallStarted) -> None:
        fn = self.tasks[started.name]
        args, kwargs = started.args.get("args") or [], started.args.get("kwargs") or {}
        begin = monotonic()
        try:
            output = await fn(*args, **kwargs)
        except asyncio.CancelledError:
            cancelled = "cancelled (task_manager.cancel) before it finished"
            await self._end(thread_id, started, begin, status="abandoned", error=cancelled)
            raise
        except Exception as exc:  # the task's own failure: recorded, not raised anywhere
            error = redact(f"{type(exc).__name__}: {exc}")
            await self._end(thread_id, started, begin, status="failed", error=error)
            return
        try:
            kept = to_builtins(output)
        except Exception as exc:
            error = f"its result cannot be stored: {type(exc).__name__}: {exc}"
            await self._end(thread_id, started, begin, status="failed", error=error)
            return
        await self._end(thread_id, started, begin, status="completed", output=kept)

    async def _end(
        self, thread_id: str, started: ToolCallStarted, begin: float, **outcome: Any
    ) -> None:
        finished = ToolCallFinished(
            call_id=started.call_id,
            name=started.name,
            duration_ms=(monotonic() - begin) * 1000.0,
            **outcome,
        )
        await self._write(thread_id, finished)

    async def _write(self, thread_id: str, event: Event) -> None:
        await write(
            self.store,
            tasks_thread(thread_id),
            lambda fold: [event],
            state_cls=AgentState,
            actor="tasks",
            what="a background task's record",
        )

    async def _records(self, thread_id: str) -> tuple[dict[str, ToolCallStarted], set[str]]:
        """The last start of each task of `thread_id`, and the ids of those that finished."""
        started: dict[str, ToolCallStarted] = {}
        finished: set[str] = set()
        thread = tasks_thread(thread_id)
        if await self.store.last_seq(thread) == 0:
            return started, finished
        async for record in self.store.read(thread):
            if isinstance(record.event, ToolCallStarted):
                started[record.event.call_id] = record.event
            elif isinstance(record.event, ToolCallFinished):
                finished.add(record.event.call_id)
        return started, finished

    async def recover(self, thread_id: str) -> list[str]:
        """Start again, here, each task of `thread_id` recorded as started and never
        finished that is not running in this process (its process died); their ids. A task
        the graph no longer declares is recorded as failed instead."""
        started, finished = await self._records(thread_id)
        again: list[str] = []
        for task_id, start in started.items():
            if task_id in finished or task_id in self.running:
                continue
            if start.name not in self.tasks:
                gone = f"the graph declares no task {start.name!r} any more"
                await self._end(thread_id, start, monotonic(), status="failed", error=gone)
                continue
            await self._write(thread_id, start)  # the log shows each attempt's start
            self._begin(thread_id, start)
            again.append(task_id)
        return again

    async def recover_once(self, thread_id: str) -> list[str]:
        """`recover(thread_id)` the first time this process runs the thread, for a graph
        that declares tasks (a graph with none reads nothing)."""
        if not self.tasks or thread_id in self._recovered:
            return []
        self._recovered.add(thread_id)
        return await self.recover(thread_id)

    def cancel(self, task_id: str) -> bool:
        """Cancel a task running in this process (its outcome is recorded as cancelled);
        False when no such task runs here."""
        task = self.running.get(task_id)
        if task is None:
            return False
        task.cancel()
        return True

    async def cancel_all(self) -> None:
        """Cancel every task running in this process and wait until each has recorded it."""
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_for_all(self, timeout: float | None = None) -> None:
        """Wait until every task running in this process has ended and recorded its outcome
        (at most `timeout` seconds: then `TimeoutError`, the tasks still running)."""
        tasks = list(self.running.values())
        if tasks:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*tasks, return_exceptions=True)

    def get_task_count(self) -> int:
        """How many tasks run in this process now (the seed's name)."""
        return len(self.running)
