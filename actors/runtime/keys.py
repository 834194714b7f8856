"""Idempotency keys: what tells a repeated key's request (a retry) from another one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from agentlog.actors.engine.command import Command
from agentlog.actors.runtime.spec import IdempotencyKeyMismatchError
from agentlog.events.kinds import TriggerAccepted
from agentlog.projections.edge import to_builtins

_MADE = ("message_id", "timestamp")
"""What a message gets when it is built, not from what its sender says."""


def request_digest(input: Any, resume: bool) -> bytes:
    """What tells one keyed request from another: a digest of its input as JSON with sorted
    keys, messages' ids and timestamps left out (a message built anew for a retry gets new
    ones), and whether it answers an interrupt."""

    def plain(item: Any) -> Any:
        if isinstance(item, dict):
            made = _MADE if "role" in item and "content" in item else ()
            return {k: plain(v) for k, v in item.items() if k not in made}
        if isinstance(item, list | tuple):
            return [plain(v) for v in item]
        return item

    try:
        text = json.dumps([resume, plain(input)], sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr((resume, input))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def same_request(
    requests: Mapping[str, bytes], first: TriggerAccepted, thread_id: str | None, input: Any
) -> TriggerAccepted:
    """`first`, the trigger its caller's idempotency key names, when this request is that
    one again (its thread, its input: a retry); else `IdempotencyKeyMismatchError`, so a
    key never hands a caller another request's run. A webhook delivery's body is the
    sender's, signed with its id: only its thread is compared."""
    key = first.idempotency_key
    same_thread = first.new_thread if thread_id is None else first.thread_id == thread_id
    if not same_thread:
        raise IdempotencyKeyMismatchError(
            f"idempotency key {key!r} was used for a run on another thread: a key names "
            "one request; send a new key for a new one"
        )
    if first.cause == "webhook":
        return first
    resume = isinstance(input, Command)
    try:
        asked = to_builtins(input.resume if resume else input)
    except (TypeError, ValueError):
        asked = input
    known = requests.get(first.trigger_id)
    if known is not None and known != request_digest(asked, resume):
        raise IdempotencyKeyMismatchError(
            f"idempotency key {key!r} was used for a run with other input: a key names "
            "one request; send a new key for a new one"
        )
    return first
