"""What a thread's head alone decides, kept per head: its summary (the thread without its
values) and its last hash-chain check.

Folding a long thread costs its length (about 100 ms at 10,000 steps) and recomputing its
chain costs every record (30,000 at 10,000 steps), yet a finished thread's answer is the
same each time it is asked. Both are kept per thread with the head they were made at (the
seq and hash of its last record, read before them): an append changes the head, so a new
record is never answered from before it. Reading the head costs one record.

A summary is the log's answer at that head; damage done behind the store afterwards is
what `verify` finds, and a check is reused only when the caller allows its age
(`max_age`): a fresh one is made otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import msgspec

from agentlog.actors.http.access import deleted, graph_of
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.shapes import thread_json
from agentlog.actors.http.tokens import Principal, Right
from agentlog.actors.runtime.facade import RuntimeFacade, created_metadata, hidden, hidden_by
from agentlog.events import VerifyReport
from agentlog.events.errors import StoreError, ThreadNotFoundError
from agentlog.projections import ExecutionStatus

KEPT = 256
"""Threads whose summary and check are kept (the least recently used go first)."""

Head = tuple[int, str]
"""A thread's last seq and its record's hash."""


@dataclass(frozen=True)
class Summary:
    """A thread at one head, without its values."""

    head: Head
    graph: str
    thread: dict[str, Any]
    """As `GET /log/threads/{id}?values=false` shows it."""
    hidden: bool
    hidden_by: Any
    status: ExecutionStatus
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Check:
    head: Head | None
    report: VerifyReport
    at: float
    """When the chain was recomputed (epoch s)."""


class _Kept:
    def __init__(self) -> None:
        self.summaries: OrderedDict[str, Summary] = OrderedDict()
        self.checks: OrderedDict[str, Check] = OrderedDict()
        self.folding: dict[tuple[str, Head, str], asyncio.Future[Summary]] = {}


_KEPT: WeakKeyDictionary[RuntimeFacade, _Kept] = WeakKeyDictionary()


def _kept(rt: RuntimeFacade) -> _Kept:
    kept = _KEPT.get(rt)
    if kept is None:
        kept = _KEPT[rt] = _Kept()
    return kept


def _keep(table: OrderedDict[str, Any], thread_id: str, value: Any) -> None:
    table[thread_id] = value
    table.move_to_end(thread_id)
    while len(table) > KEPT:
        table.popitem(last=False)


async def head_of(rt: RuntimeFacade, thread_id: str) -> Head:
    """The thread's last seq and hash; `ThreadNotFoundError` for a thread with no record."""
    seq = await rt.head(thread_id)
    record = await rt.record_at(thread_id, seq) if seq else None
    if record is None:
        raise ThreadNotFoundError(thread_id)
    return seq, record.hash


async def summary(rt: RuntimeFacade, thread_id: str, graph: str) -> Summary:
    """The thread's summary at its head: kept from an earlier request at the same head, or
    folded now (the head read first, so a summary is never kept under a later head).
    Requests that arrive while it is folded wait for that fold instead of folding again."""
    kept = _kept(rt)
    head = await head_of(rt, thread_id)
    found = kept.summaries.get(thread_id)
    if found is not None and found.head == head and found.graph == graph:
        kept.summaries.move_to_end(thread_id)
        return found
    key = (thread_id, head, graph)
    folding = kept.folding.get(key)
    if folding is not None:
        try:
            return await asyncio.shield(folding)
        except asyncio.CancelledError:
            if not folding.cancelled():
                raise  # this request was cancelled, not the fold it waited for
    folding = kept.folding[key] = asyncio.get_running_loop().create_future()
    try:
        made = await _fold(rt, thread_id, graph, head)
    except asyncio.CancelledError:
        folding.cancel()  # a request waiting for it folds itself
        raise
    except Exception as exc:
        folding.set_exception(exc)
        folding.exception()  # said to whoever waits; none may
        raise
    finally:
        if kept.folding.get(key) is folding:
            del kept.folding[key]
    folding.set_result(made)
    _keep(kept.summaries, thread_id, made)
    return made


async def _fold(rt: RuntimeFacade, thread_id: str, graph: str, head: Head) -> Summary:
    state = await rt.state(thread_id, graph)
    created_at, updated_at = await rt.thread_times(thread_id)
    return Summary(
        head=head,
        graph=graph,
        thread=thread_json(thread_id, graph, state, created_at, updated_at, with_values=False),
        hidden=hidden(state),
        hidden_by=hidden_by(state),
        status=state.execution_meta.status,
        metadata=created_metadata(state),
    )


async def readable(rt: RuntimeFacade, thread_id: str, who: Principal, right: Right) -> Summary:
    """The summary of a thread a principal with `right` on its graph asks for; a deleted
    (hidden) thread answers 404, saying so (`access.visible` without the thread's state)."""
    graph = await graph_of(rt, thread_id)
    who.require(right, graph)
    found = await summary(rt, thread_id, graph)
    if found.hidden:
        raise ApiError(404, "not_found", deleted(thread_id, found.hidden_by))
    return found


async def check(rt: RuntimeFacade, thread_id: str, max_age: float = 0.0) -> Check:
    """The thread's hash chain recomputed; or, with a check at most `max_age` seconds old
    (0: never), that check: as it was for the same head, or carried on through the records
    appended since (each checked against its link from the head it ended at). Its `at` is
    when its oldest records were checked."""
    kept = _kept(rt)
    try:
        head: Head | None = await head_of(rt, thread_id)
    except StoreError:  # a damaged head: what verify reports, never kept
        head = None
    found = kept.checks.get(thread_id)
    now = time.time()
    if head is not None and found is not None and now - found.at <= max_age:
        if found.head == head:
            return found
        grown = await _grown(rt, thread_id, found, head)
        if grown is not None:
            _keep(kept.checks, thread_id, grown)
            return grown
    made = Check(head=head, report=await rt.verify(thread_id), at=now)
    if head is not None:
        _keep(kept.checks, thread_id, made)
    return made


async def _grown(rt: RuntimeFacade, thread_id: str, found: Check, head: Head) -> Check | None:
    """`found`, an intact check, carried on to `head` through the records appended since;
    None when it cannot be (not intact, not an older head of this chain, a broken link:
    the whole chain is checked then, and says where)."""
    if not found.report.ok or found.head is None or found.head[0] >= head[0]:
        return None
    seq, digest = found.head
    read = 0
    try:  # each record checked against its hash, from the one the check ended at
        async for record in rt.runtime.store.read(
            thread_id, seq + 1, head[0], after_hash=bytes.fromhex(digest)
        ):
            read += 1
            last = record.hash
    except StoreError:
        return None
    if read != head[0] - seq or last != head[1]:
        return None
    report = msgspec.structs.replace(
        found.report, records_checked=found.report.records_checked + read, head_hash=head[1]
    )
    return Check(head=head, report=report, at=found.at)
