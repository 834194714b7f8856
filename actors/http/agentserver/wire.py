"""The edge between agentlog's log and the Agent Server's wire format: status words, dates,
checkpoint ids and values, converted in one place.

Status words come from the one fold (a thread's `ExecutionStatus`) and the runtime's ledger
(a run's outcome), mapped by the two tables below, which docs/agent-server.md shows:

| agentlog (fold / ledger)                          | Agent Server thread |
|---------------------------------------------------|---------------------|
| `idle`, `completed`, `cancelled`                  | `idle`              |
| `running`, or a run of the thread queued/running  | `busy`              |
| `interrupted_before`, `interrupted_after`         | `interrupted`       |
| `error`                                           | `error`             |

| agentlog run (trigger)                            | Agent Server run    |
|---------------------------------------------------|---------------------|
| accepted, not dispatched                          | `pending`           |
| executing                                         | `running`           |
| `completed`                                       | `success`           |
| `interrupted`, `cancelled`                        | `interrupted`       |
| `failed` of a timeout, `failed`, `rejected`       | `timeout`, `error`  |

A checkpoint id names one point of a thread's log: the seq of the record it was read at and
the first 24 hex digits of that record's chain hash (`"42-3fa9..."`), so an id also proves
which history it belongs to: a forged or foreign id does not match the record at its seq.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from agentlog.events.errors import InvalidArgumentError
from agentlog.projections import ExecutionStatus, Message
from agentlog.projections.edge import to_builtins
from agentlog.projections.langchain import from_langchain, to_langchain

THREAD_STATUS: dict[str, str] = {
    ExecutionStatus.IDLE: "idle",
    ExecutionStatus.COMPLETED: "idle",
    ExecutionStatus.CANCELLED: "idle",
    ExecutionStatus.RUNNING: "busy",
    ExecutionStatus.INTERRUPTED_BEFORE: "interrupted",
    ExecutionStatus.INTERRUPTED_AFTER: "interrupted",
    ExecutionStatus.ERROR: "error",
}
"""A thread's status as the fold says it -> the Agent Server's word."""

RUN_OUTCOME: dict[str, str] = {
    "completed": "success",
    "interrupted": "interrupted",
    "cancelled": "interrupted",
    "failed": "error",
    "rejected": "error",
}
"""A run's outcome as the ledger records it -> the Agent Server's word."""

LANGCHAIN_KINDS = {
    "human": "HumanMessage",
    "ai": "AIMessage",
    "system": "SystemMessage",
    "tool": "ToolMessage",
    "remove": "RemoveMessage",
}
"""A LangChain message dict's `type` -> its class (`langchain_core.messages`)."""

HASH_DIGITS = 24
"""How much of the chain hash a checkpoint id carries."""


class BadCheckpointError(InvalidArgumentError):
    """A checkpoint id that is not one of the thread's (malformed, or not its history)."""


def thread_status(status: str, busy: bool) -> str:
    """A thread's Agent Server status: `busy` while a run of it is queued or executes."""
    if busy:
        return "busy"
    return THREAD_STATUS.get(status, "idle")


def run_status(outcome: str | None, *, running: bool, error_type: str | None = None) -> str:
    """A run's Agent Server status from the ledger's outcome (None: not ended)."""
    if outcome is None:
        return "running" if running else "pending"
    if outcome == "failed" and error_type and "timeout" in error_type.lower():
        return "timeout"
    return RUN_OUTCOME.get(outcome, "error")


def iso(at: float | None) -> str | None:
    """An epoch time as the ISO 8601 string the Agent Server answers with (UTC)."""
    if at is None or not math.isfinite(at):
        return None
    return datetime.fromtimestamp(at, UTC).isoformat()


def checkpoint_id(seq: int, chain_hash: str) -> str:
    """The id of the point of a thread's log right after record `seq`."""
    return f"{seq}-{chain_hash[:HASH_DIGITS]}"


def parse_checkpoint_id(text: str) -> tuple[int, str]:
    """The seq and hash prefix a checkpoint id names; `BadCheckpointError` when malformed."""
    seq_text, _, digest = str(text).partition("-")
    if not seq_text.isdigit() or len(digest) != HASH_DIGITS or not _hex(digest):
        raise BadCheckpointError(
            f"checkpoint_id {str(text)[:60]!r} is not one of this server's (they read "
            "'<seq>-<hash>'): take it from the thread's state or history"
        )
    return int(seq_text), digest


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def checkpoint(thread_id: str, ident: str | None, ns: str = "") -> dict[str, Any]:
    """A `Checkpoint` as the Agent Server shows it."""
    return {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "checkpoint_id": ident,
        "checkpoint_map": None,
    }


def message_dict(message: Any) -> dict[str, Any]:
    """A message as LangChain serializes it (`type`, `content`, `id`, `tool_calls`,
    `usage_metadata`, ...): a LangChain message as it is, agentlog's converted first."""
    if isinstance(message, Message):
        message = to_langchain(message)
    dumped: dict[str, Any] = message.model_dump(mode="json")
    return dumped


def _is_langchain(value: Any) -> bool:
    return isinstance(value, BaseModel) and hasattr(value, "type") and hasattr(value, "content")


def jsonable(value: Any) -> Any:
    """A value of a graph as JSON the Agent Server would send: messages as LangChain dicts,
    interrupts as `{"value", "id"}`, models and dataclasses as their fields."""
    if isinstance(value, Message) or _is_langchain(value):
        return message_dict(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if {"value", "id"} <= set(fields):  # an Interrupt
            return {"value": jsonable(fields["value"]), "id": fields["id"]}
        return jsonable(fields)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return to_builtins(value)


def incoming(value: Any) -> Any:
    """A value a client sends (a run's input, a state edit) as the graph takes it: LangChain
    message dicts (`{"type": "human", "content": ...}`, as a LangChain program serializes
    them) read as messages; anything else as it is."""
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind in LANGCHAIN_KINDS and "content" in value and "role" not in value:
            from langchain_core import messages

            cls = getattr(messages, LANGCHAIN_KINDS[str(kind)])
            try:
                return to_builtins(from_langchain(cls.model_validate(dict(value))))
            except (ValidationError, KeyError, TypeError, ValueError) as exc:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InvalidArgumentError(
                    f"a {kind!r} message is not a LangChain {cls.__name__} ({why}): send "
                    "its fields as LangChain serializes them (a 'tool' message needs "
                    "'tool_call_id', 'content' is text or a list of content blocks)"
                ) from None
        return {k: incoming(v) for k, v in value.items()}
    if isinstance(value, list):
        return [incoming(v) for v in value]
    return value
