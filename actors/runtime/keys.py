"""Idempotency keys: what tells a repeated key's request (a retry) from another one."""

from __future__ import annotations

import hashlib
import json
from typing import Any

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
