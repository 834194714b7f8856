"""What a run says while it runs and the log does not keep, handed live to a front's streams
of that run: what a node writes with `get_stream_writer()` (`custom`) and a model's token
deltas (`messages`), on the process the run executes on.

A front that streams runs turns this on (`LiveParts.of(runtime)`) and says which modes a run's
streams want (`want`); each run the runtime dispatches then runs with a `LiveTap` as its
stream. The tap is not an actor: a part goes to the run's subscribers the moment the node
hands it over (from the event loop or a `def` node's worker thread), tagged with the seq of
the run's last commit, so a stream that merges the parts with the run's records puts each
part right after the records committed before it, and before the node's step commits.

Nothing here is persisted. A subscriber's buffer is bounded (`BUFFER`): a subscriber that
falls behind loses the parts that arrive while its buffer is full (counted in `dropped`);
the run never waits for it. A subscriber sees the parts handed over after it subscribed;
the first one to ask for them (the stream a run was created with) also gets those handed
over before it came (up to `BUFFER`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentlog.actors.engine.modes import ModeProjection, Part, StreamMode
from agentlog.actors.engine.stream import END_OF_STREAM, RunStream
from agentlog.events import EventRecord
from agentlog.projections import AgentState, StreamChunk

if TYPE_CHECKING:
    from agentlog.actors.runtime.dispatch import Dispatcher
    from agentlog.actors.runtime.ledger import TriggerState
    from agentlog.actors.runtime.runtime import AgentRuntime

BUFFER = 1024
"""How many parts a subscriber holds that it has not taken yet; past that, new ones are
dropped for it."""

WANTS_KEPT = 10_000
"""How many runs' wanted modes are kept before the oldest are forgotten (a run never
dispatched on this process keeps its entry until then)."""

LIVE_MODES = frozenset({StreamMode.CUSTOM, StreamMode.MESSAGES})
"""The engine's modes whose live parts a tap hands over."""


@dataclass(frozen=True)
class LivePart:
    """A part as a run handed it over: `after` is the seq of the run's last commit then."""

    after: int
    part: Part


@dataclass
class LiveProjection(ModeProjection):
    """A run's projection for its live parts: it follows the run's commits (the step and
    node a part's metadata names, the seq a part comes after) and makes no part of them,
    the log being where a stream reads those."""

    seq: int = 0
    """The seq of the run's last commit."""

    def committed(self, records: Sequence[EventRecord], state: AgentState) -> list[Part]:
        super().committed(records, state)
        if records:
            self.seq = records[-1].seq
        return []


class Subscription:
    """One stream's share of a run's live parts: a bounded buffer, and a wake-up."""

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop) -> None:
        self.channel = channel
        self.items: deque[LivePart] = deque()
        self.dropped = 0
        """How many parts were dropped for this subscriber (its buffer was full)."""
        self._loop = loop
        self._thread = threading.get_ident()
        self._ready = asyncio.Event()

    def put(self, item: LivePart) -> None:
        """Called with the channel's lock held, from any thread."""
        if len(self.items) >= BUFFER:
            self.dropped += 1
            return
        self.items.append(item)
        self.wake()

    def wake(self) -> None:
        if threading.get_ident() == self._thread:
            self._ready.set()
        else:  # from a worker thread; not at all once the subscriber's loop has closed
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._ready.set)

    def take(self, upto: int | None = None) -> list[LivePart]:
        """The parts handed over after the run's commit `upto` at the latest (all: None)."""
        out: list[LivePart] = []
        with self.channel.lock:
            while self.items and (upto is None or self.items[0].after <= upto):
                out.append(self.items.popleft())
            self._ready.clear()  # those left wait for a record: no wake-up until new ones
        return out

    async def wait(self) -> None:
        """Until a part is there to take."""
        await self._ready.wait()


class Channel:
    """One run's live parts, handed to its subscribers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.subscribers: list[Subscription] = []
        self.backlog: deque[LivePart] | None = deque()
        """What was handed over before anyone asked for it (up to `BUFFER`, the rest
        counted in `backlog_dropped`): None once taken."""
        self.backlog_dropped = 0
        self.taps = 0

    def publish(self, item: LivePart) -> None:
        with self.lock:
            if self.backlog is not None and len(self.backlog) < BUFFER:
                self.backlog.append(item)
            elif self.backlog is not None:
                self.backlog_dropped += 1
            for subscriber in self.subscribers:
                subscriber.put(item)


class LiveTap(RunStream):
    """A run's stream that hands its live parts to the run's channel, never waiting."""

    def __init__(self, hub: LiveParts, run_id: str, projection: LiveProjection) -> None:
        super().__init__(f"live:{run_id}", projection=projection)
        self.hub, self.run_id, self.live = hub, run_id, projection
        self.channel = hub.channel(run_id)
        self.channel.taps += 1
        self.ended = False

    def start(self) -> LiveTap:
        return self  # no actor task: a part is handed over where it is made

    async def tell(self, message: StreamChunk | Part) -> None:
        if message is END_OF_STREAM:
            self.end()
        elif isinstance(message, StreamChunk):
            for part in self.live.delta(message):
                self.write(part)
        else:
            self.write(message)

    def write(self, part: Part) -> None:
        if not self.ended and part.mode in LIVE_MODES:
            self.channel.publish(LivePart(self.live.seq, part))

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.hub.untapped(self.run_id, self.channel)


class LiveParts:
    """A runtime's live parts, run by run (turned on by a front that streams them)."""

    def __init__(self) -> None:
        self.channels: dict[str, Channel] = {}
        self.modes: dict[str, frozenset[StreamMode]] = {}
        self.taps: dict[str, LiveTap] = {}

    @classmethod
    def of(cls, runtime: AgentRuntime) -> LiveParts:
        """The runtime's live parts, turned on at the first call."""
        hub = _HUBS.get(runtime)
        if hub is None:
            hub = _HUBS[runtime] = cls()
        return hub

    def want(self, run_id: str, modes: Iterable[StreamMode]) -> None:
        """The run's streams want these of the live modes (a run not dispatched yet gets
        them when it is; one running, from now on)."""
        wanted = frozenset(modes) & LIVE_MODES
        if not wanted:
            return
        self.modes[run_id] = wanted | self.modes.get(run_id, frozenset())
        while len(self.modes) > WANTS_KEPT:  # runs never dispatched here: forgotten
            del self.modes[next(iter(self.modes))]
        tap = self.taps.get(run_id)
        if tap is not None:
            tap.live.modes = self.modes[run_id]

    def channel(self, run_id: str) -> Channel:
        channel = self.channels.get(run_id)
        if channel is None:
            channel = self.channels[run_id] = Channel()
        return channel

    def tap(self, trigger: TriggerState, projection: ModeProjection) -> LiveTap:
        """The stream of one attempt of the run `trigger` starts, over the graph's own
        `projection` (its shapes of messages and values)."""
        fields = {f.name: getattr(projection, f.name) for f in dataclasses.fields(ModeProjection)}
        fields["modes"] = self.modes.get(trigger.id, frozenset())
        stale = self.taps.get(trigger.id)
        if stale is not None:  # an attempt that ended before its run began (a retry)
            stale.end()
        tap = LiveTap(self, trigger.id, LiveProjection(**fields))
        self.taps[trigger.id] = tap
        return tap

    def untapped(self, run_id: str, channel: Channel) -> None:
        """An attempt of the run ended: its channel goes when no one follows it."""
        channel.taps -= 1
        if self.taps.get(run_id) is not None and self.taps[run_id].channel is channel:
            del self.taps[run_id]
        if channel.taps <= 0:
            self.modes.pop(run_id, None)
            self._drop_if_unused(run_id, channel)

    def subscribe(self, run_id: str, *, earlier: bool) -> Subscription:
        """Follow the run's live parts from now on (with `earlier`, also those handed over
        before anyone asked for them, if no one took them yet)."""
        channel = self.channel(run_id)
        subscription = Subscription(channel, asyncio.get_running_loop())
        with channel.lock:
            if earlier and channel.backlog is not None:
                subscription.items.extend(channel.backlog)
                subscription.dropped = channel.backlog_dropped
                if subscription.items:
                    subscription.wake()
            if earlier:
                channel.backlog = None
            channel.subscribers.append(subscription)
        return subscription

    def unsubscribe(self, run_id: str, subscription: Subscription) -> None:
        channel = subscription.channel
        with channel.lock:
            if subscription in channel.subscribers:
                channel.subscribers.remove(subscription)
        self._drop_if_unused(run_id, channel)

    def _drop_if_unused(self, run_id: str, channel: Channel) -> None:
        if channel.taps <= 0 and not channel.subscribers and self.channels.get(run_id) is channel:
            del self.channels[run_id]


_HUBS: weakref.WeakKeyDictionary[AgentRuntime, LiveParts] = weakref.WeakKeyDictionary()


def live_tap(dispatcher: Dispatcher, trigger: TriggerState) -> LiveTap | None:
    """The stream a run the dispatcher starts runs with: its `LiveTap` when a front turned
    live parts on for the runtime, else None."""
    hub = _HUBS.get(dispatcher.runtime)
    if hub is None:
        return None
    app = dispatcher.runtime.graphs[trigger.accepted.graph_id].app
    return hub.tap(trigger, app.stream_projection((), {"thread_id": trigger.accepted.thread_id}))
