"""Writing a thread outside a running step: fold it, build the events, check them, append.

One loop for every such write (a stop request, a human edit, a fork, the record of an
abandoned run, time travel's own edits): the events are built from the thread's state as
the log has it now, checked by `decide`, and appended after exactly the seq they were built
on; when another writer got there first, the loop folds again and builds again. A running
step has its own fold and commits through the engine (`actors/committing.py`), whose loop
follows the same rule.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from agentlog.events import Claim, ConcurrencyError, EventRecord, EventStore, ThreadBusyError
from agentlog.events.kinds import Event
from agentlog.projections.fold import Fold, decide
from agentlog.projections.state import AgentState
from agentlog.projections.views import fold_at

S = TypeVar("S", bound=AgentState)

WRITE_ATTEMPTS = 20
"""How many times a write is built again after losing the race for the next seq."""


class Append(Protocol):
    """The append a write goes through: a store's, or the engine's journal's."""

    def __call__(
        self,
        thread_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        run_id: str | None = ...,
        actor: str | Sequence[str | None] | None = ...,
        claim: Claim | None = ...,
    ) -> Awaitable[list[EventRecord]]: ...


async def write(
    store: EventStore,
    thread_id: str,
    build: Callable[[Fold[S]], Sequence[Event] | Awaitable[Sequence[Event]]],
    *,
    state_cls: type[S],
    actor: str | None,
    run_id: str | Callable[[Fold[S]], str | None] | None = None,
    claim: Claim | None = None,
    append: Append | None = None,
    what: str = "a write",
) -> list[EventRecord]:
    """Build events from the thread's state, check them and append them; retry on a race.

    `build` sees the thread's fold (a fresh state for a thread with no records) and returns
    the events to write, or nothing: then nothing is written and `[]` is returned. It may
    raise to refuse, and may be a coroutine (to read the log, as closing a run's tool calls
    does). `run_id` may be read from the fold too. `append` defaults to the store's own.
    """
    put: Any = append if append is not None else store.append
    for _ in range(WRITE_ATTEMPTS):
        if await store.last_seq(thread_id) == 0:
            fold: Fold[S] = Fold.new(state_cls)
        else:
            fold = await fold_at(store, thread_id, None, state_cls)
        built = build(fold)
        events = list(await built if inspect.isawaitable(built) else built)
        if not events:
            return []
        decide(fold.state, events, seq=fold.seq)
        try:
            records: list[EventRecord] = await put(
                thread_id,
                events,
                expected_seq=fold.seq,
                run_id=run_id(fold) if callable(run_id) else run_id,
                actor=actor,
                claim=claim,
            )
            return records
        except ConcurrencyError:
            continue
    raise ThreadBusyError(f"{what} on thread {thread_id!r} gave up: the thread kept moving")


__all__ = ["WRITE_ATTEMPTS", "Append", "write"]
