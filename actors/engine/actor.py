"""The actor core: a bounded mailbox, `tell` and `ask`, supervision and a clean stop.

An actor handles one message at a time in its own task. `tell` waits for room in the
mailbox (backpressure, not unbounded memory); `ask` also waits for the reply. A failure
while handling a message reaches the asker as the exception and the supervisor as a typed
`ActorFailed` message; the actor goes on with the next message. Stopping drains the mailbox
(or not) and fails every ask still waiting with `ActorStoppedError`, never dropping one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from agentlog.events.errors import AgentlogError, InvalidArgumentError

_log = logging.getLogger("agentlog.actors")

M = TypeVar("M")
R = TypeVar("R")


class ControlSignal(BaseException):
    """Control flow that passes through an actor to its asker (a pause), not a failure.

    It derives from BaseException so that user code's `except Exception:` lets it through.
    """


class ActorError(AgentlogError):
    """Something went wrong talking to an actor."""


class ActorStoppedError(ActorError):
    """The actor stopped before it could handle the message."""


class AskTimeoutError(ActorError, TimeoutError):
    """No reply came within the ask's timeout."""


@dataclass(frozen=True)
class ActorFailed:
    """What a supervisor learns when an actor's handler raised."""

    actor: str
    message: object
    error: BaseException


@dataclass
class _Envelope:
    message: Any
    reply: asyncio.Future[Any] | None = None


@dataclass
class _Stop:
    drain: bool


Supervisor = Callable[[ActorFailed], Awaitable[None] | None]
"""Receives every failure of the actors it supervises."""


class Actor(Generic[M, R]):
    """Subclass and implement `receive`; optionally `on_start`, `on_stop`, `on_failure`.

    With `concurrency` above 1 (or None, unbounded) the actor handles that many messages at
    once, each in its own task; the mailbox still bounds what waits.
    """

    def __init__(
        self,
        name: str,
        *,
        mailbox_size: int = 1024,
        supervisor: Supervisor | None = None,
        concurrency: int | None = 1,
    ) -> None:
        if mailbox_size < 1:
            raise InvalidArgumentError(f"mailbox_size must be >= 1, got {mailbox_size}")
        if concurrency is not None and concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be >= 1 or None, got {concurrency}")
        self.name = name
        self.concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency) if concurrency and concurrency > 1 else None
        self._in_hand: set[asyncio.Task[None]] = set()
        self.supervisor = supervisor
        self._mailbox: asyncio.Queue[_Envelope | _Stop] = asyncio.Queue(mailbox_size)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # ---- what subclasses write ---------------------------------------------------------

    async def receive(self, message: M) -> R:
        """Handle one message; the return value is the reply to an `ask`."""
        raise NotImplementedError

    async def on_start(self) -> None:
        """Called in the actor's task before the first message."""

    async def on_stop(self) -> None:
        """Called in the actor's task after the last message."""

    async def on_failure(self, message: M, error: BaseException) -> None:
        """Called when `receive` raised for `message`, before the supervisor hears of it."""

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between `start` and the end of `stop`."""
        return self._task is not None and not self._task.done()

    def start(self) -> Self:
        """Start the actor's task (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"actor:{self.name}"
            )
        return self

    async def stop(self, *, drain: bool = True) -> None:
        """Stop after the messages already queued (`drain`), or now: without draining, queued
        asks fail and messages in hand are cancelled (their asks fail too)."""
        if self._task is None or self._task.done():
            self._fail_queued()
            return
        if not self._stopping:
            self._stopping = True
            if not drain:
                self._fail_queued()
                self._task.cancel()  # interrupts a receive in progress, whatever it awaits
            else:
                await self._mailbox.put(_Stop(drain))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._task)

    # ---- messaging -----------------------------------------------------------------------

    async def tell(self, message: M) -> None:
        """Queue a message; waits while the mailbox is full."""
        self._check_accepting(message)
        await self._mailbox.put(_Envelope(message))
        self._after_put()

    async def ask(self, message: M, *, timeout: float | None = None) -> R:
        """Queue a message and wait for the reply (or the handler's exception)."""
        self._check_accepting(message)
        reply = self._handed(message)
        if reply is None:
            reply = asyncio.get_running_loop().create_future()
            await self._mailbox.put(_Envelope(message, reply))
            self._after_put()
        try:
            if timeout is None:
                return await reply  # cancelling the asker cancels the reply: handled below
            return await asyncio.wait_for(asyncio.shield(reply), timeout)
        except asyncio.CancelledError:
            reply.cancel()
            raise
        except TimeoutError:
            reply.cancel()
            raise AskTimeoutError(
                f"actor {self.name!r} did not answer {type(message).__name__} within {timeout}s"
            ) from None

    def ask_nowait(self, message: M) -> asyncio.Future[R]:
        """Queue a message now and return the future of its reply.

        The message is handled whether or not anyone awaits the future; cancelling it before
        the handler starts withdraws the message. An idle unbounded actor saves the task
        that `ensure_future(ask(...))` costs.
        """
        self._check_accepting(message)
        reply = self._handed(message)
        if reply is None:  # messages wait in the mailbox: queue behind them, room permitting
            return asyncio.ensure_future(self.ask(message))
        return reply

    def _handed(self, message: M) -> asyncio.Future[R] | None:
        """Unbounded and idle: hand `message` to a task of its own now, saving the loop a
        turn (what is queued still goes first), and return its reply; else None."""
        if self.concurrency is not None or not self._mailbox.empty():
            return None
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[R] = loop.create_future()
        task = loop.create_task(self._handle(_Envelope(message, reply)))
        self._in_hand.add(task)
        task.add_done_callback(self._release)
        return reply

    def _after_put(self) -> None:
        """A put that waited for room may land after the actor ended: fail it, never hang."""
        if self._stopping or (self._task is not None and self._task.done()):
            self._fail_queued()

    def _check_accepting(self, message: object) -> None:
        if self._task is None:
            raise ActorStoppedError(f"actor {self.name!r} is not started: call start() first")
        if self._stopping or self._task.done():
            raise ActorStoppedError(
                f"actor {self.name!r} is stopped and cannot take {type(message).__name__}"
            )

    # ---- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        await self.on_start()
        try:
            while True:
                item = await self._mailbox.get()
                if isinstance(item, _Stop):
                    if self._in_hand:
                        if not item.drain:
                            for task in self._in_hand:
                                task.cancel()
                        await asyncio.wait(self._in_hand)
                    return
                if self.concurrency == 1:
                    await self._handle(item)
                    continue
                if self._slots is not None:
                    await self._slots.acquire()
                task = asyncio.get_running_loop().create_task(self._handle(item))
                self._in_hand.add(task)
                task.add_done_callback(self._release)
        finally:
            for task in self._in_hand:
                task.cancel()
            self._stopping = True
            self._fail_queued()
            try:
                await self.on_stop()
            finally:
                self._fail_queued()

    def _release(self, task: asyncio.Task[None]) -> None:
        self._in_hand.discard(task)
        if self._slots is not None:
            self._slots.release()

    async def _handle(self, envelope: _Envelope) -> None:
        reply = envelope.reply
        if reply is not None and reply.done():  # the asker gave up
            return
        try:
            result = await self.receive(envelope.message)
        except asyncio.CancelledError:
            if reply is not None and not reply.done():
                reply.set_exception(ActorStoppedError(f"actor {self.name!r} was cancelled"))
            raise
        except ControlSignal as signal:
            if reply is not None and not reply.done():
                reply.set_exception(signal)
            return
        except Exception as error:
            if reply is not None and not reply.done():
                reply.set_exception(error)
            try:
                await self.on_failure(envelope.message, error)
                await self._tell_supervisor(ActorFailed(self.name, envelope.message, error))
            except Exception:  # a broken hook must not take the actor down with it
                _log.exception("actor %r: failure hook or supervisor raised", self.name)
            return
        if reply is not None and not reply.done():
            reply.set_result(result)

    async def _tell_supervisor(self, failure: ActorFailed) -> None:
        if self.supervisor is None:
            return
        outcome = self.supervisor(failure)
        if outcome is not None:
            await outcome

    def _fail_queued(self) -> None:
        while not self._mailbox.empty():
            item = self._mailbox.get_nowait()
            if isinstance(item, _Envelope) and item.reply is not None and not item.reply.done():
                item.reply.set_exception(
                    ActorStoppedError(
                        f"actor {self.name!r} stopped before handling {type(item.message).__name__}"
                    )
                )
