"""A run's live parts (`agentlog.actors.runtime.live`) as the Agent Server sends them: `custom`
as the node wrote it; a model's token chunks as `messages` tuples `[chunk, metadata]`
(`messages-tuple`), as `messages/metadata` once per message then `messages/partial` with the
message so far (`messages`), and as `on_chat_model_stream` events (`events`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentlog.actors.engine.modes import Part, StreamMode
from agentlog.actors.http.agentserver import wire
from agentlog.actors.runtime.live import LivePart, LiveParts, Subscription
from agentlog.projections import Message

LIVE_OF: dict[str, StreamMode] = {
    "custom": StreamMode.CUSTOM,
    "messages": StreamMode.MESSAGES,
    "messages-tuple": StreamMode.MESSAGES,
    "events": StreamMode.MESSAGES,
}
"""An Agent Server stream mode -> the engine's live mode its deltas come from."""


def live_modes(modes: Sequence[str]) -> set[StreamMode]:
    """The live modes the Agent Server modes `modes` want."""
    return {LIVE_OF[m] for m in modes if m in LIVE_OF}


def _sse(event: str, data: Any) -> str:
    """One Server-Sent Event without an id: a live part is no position of the log, so a
    client resuming with `Last-Event-ID` resumes after the last record it saw."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=True, default=str)}\n\n"


def _message_id(message: Any) -> Any:
    if isinstance(message, Message):
        return message.message_id
    if isinstance(message, dict):
        return message.get("id")
    return getattr(message, "id", None)


def _is_chunk(message: Any) -> bool:
    if isinstance(message, Message):
        return message.delta
    return type(message).__name__.endswith("Chunk")


class LiveWire:
    """One stream's live parts of a run, in the Agent Server's events."""

    def __init__(
        self, hub: LiveParts, run_id: str, modes: Sequence[str], subgraphs: bool, earlier: bool
    ) -> None:
        self.hub, self.run_id = hub, run_id
        self.modes, self.subgraphs = list(modes), subgraphs
        self.subscription: Subscription = hub.subscribe(run_id, earlier=earlier)
        self.sent: set[Any] = set()
        """The ids of the messages whose chunks were sent: not sent again whole from the log."""
        self.so_far: dict[str, Any] = {}
        """Each message's chunks so far, added up (`messages/partial` sends it)."""

    @classmethod
    def of(
        cls, hub: LiveParts, run_id: str, modes: Sequence[str], subgraphs: bool, *, earlier: bool
    ) -> LiveWire | None:
        """None when no mode asked for has live parts."""
        if not live_modes(modes):
            return None
        return cls(hub, run_id, modes, subgraphs, earlier)

    def close(self) -> None:
        self.hub.unsubscribe(self.run_id, self.subscription)

    def streamed(self, part: Part) -> bool:
        """Whether a whole message the log says is one this stream sent the chunks of (it is
        sent again whole when some of its chunks were dropped for this stream)."""
        if part.mode is not StreamMode.MESSAGES or self.subscription.dropped:
            return False
        message, metadata = part.data
        if _message_id(message) in self.sent:
            return True
        mine = isinstance(message, Message) and message.role == "assistant"
        mine = mine or getattr(message, "type", None) == "ai"
        return mine and _turn(wire.jsonable(metadata)) in self.sent

    def events(self, *, upto: int | None) -> list[str]:
        """The events of the live parts made after the run's commit `upto` at the latest."""
        out: list[str] = []
        for item in self.subscription.take(upto):
            out += self._events(item)
        return out

    def _events(self, item: LivePart) -> list[str]:
        part = item.part
        if part.ns and not self.subgraphs:
            return []
        ns = "|".join(part.ns)
        name = (lambda mode: f"{mode}|{ns}") if ns else (lambda mode: mode)
        if part.mode is StreamMode.CUSTOM:
            return (
                [_sse(name("custom"), wire.jsonable(part.data))] if "custom" in self.modes else []
            )
        message, metadata = part.data
        metadata = wire.jsonable(metadata)
        key = _message_id(message)
        if isinstance(message, Message) and message.delta:  # agentlog's deltas: one per step
            key = _turn(metadata)
        self.sent.add(key)
        chunk = wire.jsonable(message)
        out: list[str] = []
        if "messages-tuple" in self.modes:
            out.append(_sse(name("messages"), [chunk, metadata]))
        if "messages" in self.modes:
            if key not in self.so_far:
                out.append(_sse(name("messages/metadata"), {key: {"metadata": metadata}}))
            whole = self._added(str(key), message)
            kind = "messages/partial" if _is_chunk(message) else "messages/complete"
            out.append(_sse(name(kind), [whole]))
        if "events" in self.modes:
            event = {
                "event": "on_chat_model_stream",
                "name": metadata.get("ls_model_name") or metadata.get("langgraph_node"),
                "run_id": key,
                "tags": [],
                "metadata": metadata,
                "data": {"chunk": chunk},
            }
            out.append(_sse(name("events"), event))
        return out

    def _added(self, key: str, message: Any) -> dict[str, Any]:
        """The message so far, with `message` added, as a whole message's dict."""
        before = self.so_far.get(key)
        if before is not None:
            langchain = all(type(m).__name__.endswith("Chunk") for m in (before, message))
            if langchain:  # LangChain's chunks add up as LangChain adds them
                message = before + message
            else:  # agentlog's own deltas: their text joined
                message = _joined(wire.jsonable(before), wire.jsonable(message))
        self.so_far[key] = message
        whole = wire.jsonable(message)
        if not isinstance(whole, dict):
            return {"content": whole}
        if str(whole.get("type", "")).endswith("Chunk"):
            whole = {
                k: v for k, v in whole.items() if k not in ("tool_call_chunks", "chunk_position")
            }
            whole["type"] = "ai"
        whole["id"] = key
        return whole


def _turn(metadata: dict[str, Any]) -> str:
    """The key of a model node's deltas (they carry no id of their message): its node and
    step, whose assistant message they are."""
    return f"{metadata.get('langgraph_node')}:{metadata.get('langgraph_step')}"


def _joined(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Two chunks of one message as one: their text content joined, the later's fields."""
    joined = {**before, **after}
    if isinstance(before.get("content"), str) and isinstance(after.get("content"), str):
        joined["content"] = before["content"] + after["content"]
    return joined
