"""A recorded thread as the answers to a replay: each tool call's result and each model
call's message, found by the step (and node) the code under test asks in."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from agentlog.actors.engine.replaying import ReplayUnansweredError
from agentlog.events import EventRecord
from agentlog.events.kinds import (
    MessageAppended,
    ModelCalled,
    StepAdvanced,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.projections import Message, to_builtins

if TYPE_CHECKING:
    from agentlog.actors.engine.context import NodeContext
    from agentlog.projections import ToolCallBlock

__all__ = ["LoggedThread", "Note"]


@dataclass(frozen=True)
class Note:
    """Why the log could not answer the code at `step`, in `node`."""

    step: int
    node: str
    cause: str
    detail: str
    log: list[dict[str, Any]] = field(default_factory=list)
    produced: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Call:
    started: ToolCallStarted | None
    finished: ToolCallFinished
    used: bool = False


@dataclass
class _Model:
    called: ModelCalled
    message: dict[str, Any] | None
    used: bool = False


class LoggedThread:
    """The answers one recorded thread holds (`LogAnswers`), by step: a tool call is
    answered by the recorded call of its step with the same id, else the same name and
    arguments; a model call by the step's next completed call of the same node, when its
    request hash is the recorded one. Anything else is noted and refused."""

    def __init__(self, records: Sequence[EventRecord]) -> None:
        self.tools: dict[int, list[_Call]] = defaultdict(list)
        self.models: dict[tuple[int, str], list[_Model]] = defaultdict(list)
        self.notes: list[Note] = []
        started: dict[str, ToolCallStarted] = {}
        pending: list[Any] = []
        messages: dict[str, dict[str, Any]] = {}
        for record in records:
            event = record.event
            if isinstance(event, ToolCallStarted):
                started[event.call_id] = event
            elif isinstance(event, ToolCallFinished):
                pending.append(_Call(started.get(event.call_id), event))
            elif isinstance(event, ModelCalled) and event.status == "completed":
                pending.append(_Model(event, None))
            elif isinstance(event, MessageAppended):
                messages[str(event.message.get("message_id"))] = event.message
            elif isinstance(event, StepAdvanced):
                for item in pending:
                    if isinstance(item, _Call):
                        self.tools[event.step].append(item)
                    else:
                        item.message = messages.get(str(item.called.message_id))
                        self.models[(event.step, item.called.node)].append(item)
                pending = []

    def tool_result(self, call: ToolCallBlock, context: NodeContext) -> ToolCallFinished:
        """The recorded result of `call` at this step (see the class)."""
        options = [c for c in self.tools.get(context.step, []) if not c.used]
        args = _canonical(call.args)
        found = next((c for c in options if c.finished.call_id == call.id), None) or next(
            (
                c
                for c in options
                if c.finished.name == call.name
                and c.started is not None
                and _canonical(c.started.args) == args
            ),
            None,
        )
        if found is None:
            logged = [
                {"name": c.finished.name, "args": c.started.args if c.started else None}
                for c in options
            ]
            self._refuse(
                context,
                "unanswerable_tool_call",
                f"tool call {call.name}({args}) is not in the log at step {context.step}",
                logged,
                [{"name": call.name, "args": to_builtins(call.args)}],
            )
        assert found is not None
        found.used = True
        return msgspec.structs.replace(found.finished, call_id=call.id)

    def model_answer(
        self, request_hash: str, request: dict[str, Any], context: NodeContext
    ) -> tuple[ModelCalled, Message]:
        """The recorded call and message answering this request (see the class)."""
        options = [m for m in self.models.get((context.step, context.node), []) if not m.used]
        if not options or options[0].message is None:
            self._refuse(
                context,
                "model_request",
                f"node {context.node!r} called a model at step {context.step}, where the log "
                "has no model call of it",
                [],
                [{"request_hash": request_hash, "request": to_builtins(request)}],
            )
        found = options[0]
        if found.called.request_hash != request_hash:
            self._refuse(
                context,
                "model_request",
                f"node {context.node!r} asked its model something else at step "
                f"{context.step}: the log holds only the request's hash "
                f"{found.called.request_hash[:16]}, the new request hashes to "
                f"{request_hash[:16]}",
                [{"request_hash": found.called.request_hash, "params": found.called.params}],
                [{"request_hash": request_hash, "request": to_builtins(request)}],
            )
        found.used = True
        assert found.message is not None
        return found.called, Message.model_validate(found.message)

    def _refuse(
        self,
        context: NodeContext,
        cause: str,
        detail: str,
        log: list[dict[str, Any]],
        produced: list[dict[str, Any]],
    ) -> None:
        self.notes.append(Note(context.step, context.node, cause, detail, log, produced))
        raise ReplayUnansweredError(detail)

    def note_at(self, step: int | None) -> Note | None:
        """The first note of `step`, if the code asked there for what the log lacks."""
        return next((n for n in self.notes if step is None or n.step == step), None)


def _canonical(args: Any) -> str:
    return json.dumps(to_builtins(args), sort_keys=True, default=repr)
