"""`Relay`: the log as the outbox. Every committed record, sent to a broker, effectively once.

The relay follows the log (`follow_rows`, from its durable cursor), sends the records in
position order in batches on one connection, and saves its cursor (`save_cursor`) only once
the broker confirmed the whole batch. So a relay killed at any instant loses nothing: it
starts again from the cursor, and what it sends a second time (at most the batch it was
killed in) carries the same message ids, by which the broker or the consumer drops it.

A broker that is down, slow or cuts the connection makes the relay wait and retry with
backoff (`backoff`, doubling up to `max_backoff` seconds), never drop: it reads at most
`buffer` records ahead of what was confirmed, so memory stays bounded however far the
broker lags. What only a person can fix (a stream holding entries the relay did not write,
a record larger than the broker takes) raises `BrokerRefusedError` and stops it.

    relay = Relay(store, "redis://127.0.0.1:6379", name="to-redis")
    await relay.run()          # for ever; or `async with relay:` beside a runtime
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Self

from agentlog.actors.relay.brokers import DEFAULT_TEMPLATES, broker_of, open_sink, shown_url
from agentlog.actors.relay.message import (
    BrokerRefusedError,
    Message,
    PrevHashes,
    RelayConfigError,
    RelayError,
    Selection,
    Template,
    message,
)
from agentlog.events import (
    CursorMovedBackError,
    EventStore,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    last_position,
    load_cursor,
    save_cursor,
)
from agentlog.events.codec import Row
from agentlog.events.cursors import check_cursor_name
from agentlog.events.follow import follow_rows

__all__ = ["Relay", "RelayStatus", "relay"]

log = logging.getLogger("agentlog.relay")


@dataclass(frozen=True)
class RelayStatus:
    """Where a relay stands: `lag` is how many positions the log is ahead of its cursor."""

    name: str
    broker: str
    to: str
    cursor: int
    head: int
    lag: int
    sent: int
    copies: int
    retries: int
    connected: bool
    last_error: str | None


class Relay:
    """Send the log's records to the broker at `to`, under the durable cursor `name`.

    `kinds` and `threads` (ids or shell patterns) select what is sent (a record left out
    still moves the cursor); `subject_template` names the Redis stream key, NATS subject
    or AMQP routing key, with `{thread}` and `{kind}` (defaults: `DEFAULT_TEMPLATES`).
    Everything is checked here, before anything is read or sent (`RelayConfigError`).
    `batch` records at most go in one send; `buffer` at most are read ahead of what the
    broker confirmed; `poll_s` is how often a log written by another process is looked at
    (a commit through the same store object, or any on PostgreSQL, wakes the relay at once).
    """

    def __init__(
        self,
        store: EventStore,
        to: str,
        *,
        name: str,
        kinds: Collection[str] | None = None,
        threads: Collection[str] | None = None,
        subject_template: str | None = None,
        batch: int = 256,
        buffer: int = 2048,
        backoff: float = 0.05,
        max_backoff: float = 5.0,
        poll_s: float = 0.2,
    ) -> None:
        try:
            self.name = check_cursor_name(name)
        except ValueError as exc:
            raise RelayConfigError(f"--name: {exc}") from None
        for label, value in (("batch", batch), ("buffer", buffer)):
            if type(value) is not int or value < 1:
                raise RelayConfigError(f"{label} is an int >= 1, got {value!r}")
        if not 0 < backoff <= max_backoff:
            raise RelayConfigError(f"backoff needs 0 < backoff <= max_backoff, got {backoff!r}")
        broker = broker_of(to)
        self.store, self.to, self.broker = store, to, broker
        self.template = Template(subject_template or DEFAULT_TEMPLATES[broker], broker=broker)
        self.selection = Selection(kinds, threads)
        self.sink = open_sink(to, self.template)
        self.batch, self.buffer = batch, max(buffer, batch)
        self.backoff, self.max_backoff, self.poll_s = backoff, max_backoff, poll_s
        self.prevs = PrevHashes(store)
        self.cursor = 0
        self.head = 0
        self.read_to = 0
        """The last position read: at most `buffer` + 2 batches past the cursor (one batch
        on the wire, the next being built), so memory stays bounded while the broker is away."""
        self.sent = self.copies = self.retries = 0
        self.connected = False
        self.last_error: str | None = None
        self._moved: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- as a part of a process: start, stop, status ------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Run in the background (a task on this loop) until `stop`."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self.run())

    async def stop(self) -> None:
        """Stop sending; the cursor stays on the last confirmed batch. Raises what stopped
        the relay, if something did (`BrokerRefusedError`, a store error)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def status(self) -> RelayStatus:
        """The cursor, the log's head, the lag between them, and what was sent so far."""
        with contextlib.suppress(StoreError):
            self.head = max(self.head, await last_position(self.store))
        return RelayStatus(
            self.name, self.broker, shown_url(self.to), self.cursor, self.head,
            max(self.head - self.cursor, 0), self.sent, self.copies, self.retries,
            self.connected, self.last_error,
        )  # fmt: skip

    async def wait_for(self, position: int) -> None:
        """Return once every record up to `position` is confirmed (the cursor reached it);
        raise what stopped the relay if it stops first (started with `start`)."""
        while self.cursor < position:
            if self._moved is None:
                self._moved = asyncio.get_running_loop().create_future()
            waits: set[asyncio.Future[Any]] = {self._moved}
            task = self._task
            if task is not None:
                waits.add(task)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if task is not None and task.done() and self.cursor < position:
                task.result()  # what stopped it
                raise RelayError(f"relay {self.name!r} stopped at position {self.cursor}")

    # ---- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Relay for ever (until cancelled, or a refusal only a person can fix)."""
        self.cursor = await load_cursor(self.store, self.name)
        log.info("relay %s: from position %d to %s", self.name, self.cursor, shown_url(self.to))
        queue: asyncio.Queue[Row | BaseException] = asyncio.Queue(self.buffer)
        reader = asyncio.ensure_future(self._read(self.cursor, queue))
        shipping: asyncio.Future[None] | None = None
        try:
            while True:
                rows = await self._take(queue, shipping)
                messages: list[Message] = []
                for row in rows:  # built while the batch before is on its way
                    if self.selection(row):
                        messages.append(message(row, await self.prevs.before(row), self.template))
                    self.prevs.saw(row)
                if shipping is not None:
                    await shipping  # one batch on the wire at a time: the broker keeps order
                shipping = asyncio.ensure_future(self._ship(messages, rows[-1].position))
        finally:
            for task in (shipping, reader):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            self.connected = False
            await self.sink.close()

    async def _read(self, after: int, queue: asyncio.Queue[Row | BaseException]) -> None:
        """Follow the log into `queue`; a store that is away for a while (a PostgreSQL
        server restarting) is waited for with backoff, and followed on from where it was."""
        delay = self.backoff
        while True:
            try:
                async with contextlib.aclosing(
                    follow_rows(self.store, after=after, poll_s=self.poll_s)
                ) as rows:
                    async for row in rows:
                        self.head = max(self.head, row.position)
                        await queue.put(row)  # waits while `buffer` rows are unconfirmed
                        self.read_to = after = row.position
                        delay = self.backoff
            except StoreUnavailableError as exc:
                self.last_error = f"reading the log: {exc}"
                log.warning("relay %s: %s; retrying in %.2fs", self.name, self.last_error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
            except Exception as exc:
                await queue.put(exc)
                return

    async def _ship(self, messages: list[Message], position: int) -> None:
        if messages:
            await self._deliver(messages)
        await self._save(position)

    async def _take(
        self, queue: asyncio.Queue[Row | BaseException], shipping: asyncio.Future[None] | None
    ) -> list[Row]:
        """The next rows: one (waiting for it), then what is there already, up to a batch;
        a batch that failed on its way (a refusal) is raised as soon as it fails."""
        first = asyncio.ensure_future(queue.get())
        try:
            if shipping is not None:
                either: set[asyncio.Future[Any]] = {first, shipping}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if shipping.done() and shipping.exception() is not None:
                    shipping.result()  # raises it
            rows = [await first]
        finally:
            first.cancel()  # when the caller was cancelled, or the batch before failed
        while len(rows) < self.batch and not queue.empty():
            rows.append(queue.get_nowait())
        for i, row in enumerate(rows):
            if isinstance(row, BaseException):
                if i == 0:
                    raise row
                return rows[:i]  # type: ignore[return-value]  # the rows before it
        return rows  # type: ignore[return-value]  # checked above: rows only

    async def _deliver(self, messages: list[Message]) -> None:
        """Send until the broker confirmed all of `messages`, reconnecting as needed."""
        delay = self.backoff
        while True:
            try:
                if not self.connected:
                    await self.sink.connect()
                    self.connected = True
                    log.info("relay %s: connected to %s", self.name, shown_url(self.to))
                self.copies += await self.sink.send(messages)
                self.sent += len(messages)
                self.last_error = None
                return
            except (BrokerRefusedError, asyncio.CancelledError):
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.retries += 1
                log.warning("relay %s: %s; retrying in %.2fs", self.name, self.last_error, delay)
                self.connected = False
                await self.sink.close()
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, self.max_backoff)

    async def _save(self, position: int) -> None:
        """Save the cursor (what the broker confirmed), retrying while the store is away."""
        delay = self.backoff
        while True:
            try:
                await save_cursor(self.store, self.name, position)
                break
            except (CursorMovedBackError, StoreClosedError):
                raise
            except StoreError as exc:
                self.last_error = f"saving the cursor: {exc}"
                log.warning("relay %s: %s; retrying in %.2fs", self.name, self.last_error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
        self.cursor = position
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set_result(None)


async def relay(store: EventStore, to: str, *, name: str, **options: Any) -> None:
    """`Relay(store, to, name=name, **options).run()`: relay for ever."""
    await Relay(store, to, name=name, **options).run()
