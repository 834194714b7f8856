"""Doubles for unit tests of a graph, without a network: a scripted model, recording tools,
a fake clock and seeded ids.

`ScriptedModel` is a node that answers from a script; `RecordingTool` is a tool that records
every call and fails, hangs or is slow on the calls you name; `FakeClock` is time that moves
only when told, for a store's `clock=` and for message timestamps; `seeded_ids` makes message
ids and timestamps repeat exactly, so two runs of a graph write the same messages::

    from agentlog.actors.testing import FakeClock, MemoryEventStore, RecordingTool, ScriptedModel
    from agentlog.actors.testing import ask_tool, reply, seeded_ids

    clock = FakeClock()
    with seeded_ids(7, clock=clock):
        lookup = RecordingTool(lookup_order)
        model = ScriptedModel([ask_tool("lookup_order", order_id=3), reply("shipped")])
        graph.add_node("agent", model)
        graph.add_node("tools", ToolNode([lookup]))
        app = graph.compile(MemoryEventStore(clock=clock))
        await app.ainvoke("where is order 3?", {"thread_id": "t"})
    assert [c.args for c in lookup.calls] == [{"order_id": 3}]

Nothing here imports pytest or hypothesis.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from agentlog.events import MemoryEventStore
from agentlog.events.errors import AgentlogError
from agentlog.projections import AgentState, Message, TextBlock, ToolCallBlock, generate_id
from agentlog.projections.ids import message_defaults

__all__ = [
    "FakeClock",
    "MemoryEventStore",
    "RecordedCall",
    "RecordingTool",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Seen",
    "ask_tool",
    "ask_tools",
    "recording_tools",
    "reply",
    "seeded_ids",
    "tool_call",
]

# MemoryEventStore (re-exported above) is the in-memory store: it keeps the same contract as
# SQLiteEventStore and takes `clock=` too, so it needs no testing wrapper.

Reply = str | Message
"""What a scripted model answers: text, or a whole assistant message (with tool calls)."""


class ScriptExhaustedError(AgentlogError, LookupError):
    """A scripted model was called for a turn its script has no reply for."""


def tool_call(name: str, /, *, call_id: str | None = None, **args: Any) -> ToolCallBlock:
    """One tool call block asking for tool `name` with `args` (a fresh id unless given)."""
    return ToolCallBlock(id=call_id or str(generate_id()), name=name, args=args)


def ask_tool(name: str, /, *, call_id: str | None = None, **args: Any) -> Message:
    """An assistant message asking for one call of tool `name` with `args`."""
    return ask_tools(tool_call(name, call_id=call_id, **args))


def ask_tools(*calls: ToolCallBlock, text: str | None = None) -> Message:
    """An assistant message asking for several tool calls at once (run concurrently)."""
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    return Message(role="assistant", content=[*blocks, *calls])


def reply(text: str) -> Message:
    """An assistant message holding `text`."""
    return Message.text_message(text, role="assistant")


@dataclass(frozen=True)
class Seen:
    """What a scripted model saw on one call: the turn it answered, the context's length and
    its last message."""

    turn: int
    context_length: int
    last: Message | None


class ScriptedModel:
    """A model node answering from a script: a list of replies, or a function of the state.

    With a list, the reply for a call is the one at index *turn*, the number of assistant
    messages already in the context: a step run again after a crash, on resume or on another
    thread gets the same reply, so the script is never state kept outside the log. A text
    reply becomes a new assistant message; a `Message` is returned as given (ids and all).
    Every call is appended to `seen`.
    """

    def __init__(
        self,
        script: Sequence[Reply] | Callable[[AgentState], Reply | Sequence[Message]],
        *,
        name: str = "scripted model",
    ) -> None:
        if isinstance(script, str) or not (callable(script) or isinstance(script, Sequence)):
            raise TypeError(
                f"{name!r}: a script is a list of replies or a function of the state, "
                f"got {type(script).__name__}"
            )
        self.script = script
        self.name = name
        self.seen: list[Seen] = []

    async def __call__(self, state: AgentState) -> list[Message]:
        """Answer the state with the script's reply for this turn."""
        turn = sum(1 for m in state.context if m.role == "assistant")
        last = state.context[-1] if state.context else None
        self.seen.append(Seen(turn, len(state.context), last))
        if callable(self.script):
            answer: Reply | Sequence[Message] = self.script(state)
        elif turn < len(self.script):
            answer = self.script[turn]
        else:
            raise ScriptExhaustedError(
                f"{self.name!r} has no reply for turn {turn} (its script holds "
                f"{len(self.script)}; the last message was {_brief(last)}): add a reply, or "
                "route the graph to its end before the script runs out"
            )
        return _messages(self.name, answer)

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, calls={len(self.seen)})"


def _messages(name: str, answer: Reply | Sequence[Message]) -> list[Message]:
    """A script's answer as the list of messages a node returns."""
    if isinstance(answer, str):
        return [reply(answer)]
    if isinstance(answer, Message):
        return [answer]
    if not isinstance(answer, str) and all(isinstance(m, Message) for m in answer):
        return [m for m in answer if isinstance(m, Message)]
    raise TypeError(
        f"{name!r}: a reply is text, a Message or a list of messages, got {answer!r:.80}"
    )


def _brief(message: Message | None) -> str:
    """A message as an error names it, its text cut short (it is model or user text)."""
    if message is None:
        return "none"
    return f"a {message.role} message {message.text()[:60]!r}"


Outcome = Literal["running", "completed", "failed", "cancelled"]


@dataclass
class RecordedCall:
    """One call of a recording tool: its number (from 1), call id, arguments and outcome."""

    number: int
    call_id: str
    args: dict[str, Any]
    outcome: Outcome = "running"
    result: Any = None
    error: BaseException | None = None


_recorders: ContextVar[list[RecordingTool] | None] = ContextVar("recorders", default=None)


@contextmanager
def recording_tools() -> Iterator[list[RecordingTool]]:
    """Collect every `RecordingTool` made inside the block (what a graph factory makes)."""
    made: list[RecordingTool] = []
    token = _recorders.set(made)
    try:
        yield made
    finally:
        _recorders.reset(token)


class RecordingTool:
    """A tool that records every call and fails, hangs or is slow on the calls named.

    It keeps the wrapped function's name, docstring and signature, so a `ToolNode` describes
    it to a model as the function itself; the signature also gains the injected
    `tool_call_id` (never in a schema) when the function lacks it, to record calls by id.
    Calls are numbered from 1 in the order they begin: `fail={2: TimeoutError("down")}`
    raises on the second call, `hang={1}` waits on the first until `release()`, and
    `slow={3: 0.5}` sleeps half a second before the third. A sync function runs on the event
    loop (doubles are meant to be quick).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        fail: Mapping[int, BaseException] | None = None,
        hang: Collection[int] = (),
        slow: Mapping[int, float] | None = None,
    ) -> None:
        name = getattr(fn, "__name__", None)
        if not callable(fn) or not isinstance(name, str):
            raise TypeError(f"RecordingTool wraps a named function, got {fn!r}")
        self.fn = fn
        self.fail = dict(fail or {})
        self.hang = frozenset(hang)
        self.slow = dict(slow or {})
        self.calls: list[RecordedCall] = []
        self.hanging = asyncio.Event()
        """Set when a call starts to hang: await it before stopping the run."""
        self.released = asyncio.Event()
        functools.update_wrapper(self, fn)
        signature = inspect.signature(fn)
        self._passes_id = "tool_call_id" in signature.parameters
        annotations = dict(getattr(fn, "__annotations__", {}))
        if not self._passes_id:
            injected = inspect.Parameter(
                "tool_call_id", inspect.Parameter.KEYWORD_ONLY, default="", annotation="str"
            )
            signature = signature.replace(parameters=[*signature.parameters.values(), injected])
            annotations["tool_call_id"] = "str"
        self.__signature__ = signature
        self.__annotations__ = annotations
        made = _recorders.get()
        if made is not None:
            made.append(self)

    @classmethod
    def returning(
        cls, name: str, value: Any = None, doc: str = "", **options: Any
    ) -> RecordingTool:
        """A recording tool named `name` that takes no arguments and returns `value`."""

        def tool() -> Any:
            return value

        tool.__name__ = tool.__qualname__ = name
        tool.__doc__ = doc or f"The {name} tool."
        return cls(tool, **options)

    def release(self) -> None:
        """Let every hanging call (and every later one told to hang) go on."""
        self.released.set()

    async def __call__(self, *args: Any, tool_call_id: str = "", **kwargs: Any) -> Any:
        """Run the wrapped function for one call, as the options say, and record it."""
        bound = inspect.signature(self.fn).bind_partial(*args, **kwargs).arguments
        call = RecordedCall(len(self.calls) + 1, tool_call_id, dict(bound))
        self.calls.append(call)
        if self._passes_id:
            kwargs["tool_call_id"] = tool_call_id
        try:
            if call.number in self.hang:
                self.hanging.set()
                await self.released.wait()
            if call.number in self.slow:
                await asyncio.sleep(self.slow[call.number])
            if call.number in self.fail:
                raise self.fail[call.number]
            result = self.fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError as exc:
            call.outcome, call.error = "cancelled", exc
            raise
        except BaseException as exc:
            call.outcome, call.error = "failed", exc
            raise
        call.outcome, call.result = "completed", result
        return result

    def __repr__(self) -> str:
        return f"RecordingTool({self.fn.__name__!r}, calls={len(self.calls)})"


@dataclass
class FakeClock:
    """Time that moves only when told: a store's `clock=` and message timestamps.

    Calling it returns the current time in seconds since the epoch; `advance` moves it on.
    """

    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock on by `seconds` (not backwards) and return the new time."""
        if not seconds >= 0:
            raise ValueError(f"a clock moves forward: cannot advance by {seconds!r} seconds")
        self.now += seconds
        return self.now


@dataclass
class _SeededIds:
    """Ids shaped like UUID4 strings, drawn from a random generator seeded once."""

    seed: int
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def __call__(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


@contextmanager
def seeded_ids(
    seed: int, clock: Callable[[], float] | None = None
) -> Iterator[Callable[[], float]]:
    """Within the block, message ids (`generate_id`) come from a sequence seeded by `seed`
    and message timestamps from `clock` (a new `FakeClock` when not given), so two runs of
    the same graph under the same seed write the same messages. Yields the clock.

    The sources hold in tasks and worker threads started inside the block; give the store
    the same clock (`MemoryEventStore(clock=clock)`) for equal record times as well.
    """
    used = clock if clock is not None else FakeClock()
    with message_defaults(ids=_SeededIds(seed), clock=used):
        yield used
