"""Limits on the JSON the server takes and shows: how deeply a value may nest (one check, for
the API's bodies and the webhooks' alike), and a read that degrades for one value too deep to
show instead of failing every request that meets it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

MAX_DEPTH = 64
"""How deeply a JSON body may nest (arrays and objects); deeper ones get 400 before anything
is written, as a run could not fold them and no read could show them."""


def nesting_within(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects in `value` nest at most `limit` deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


SHOW_DEPTH = 200
"""How deeply an answer may nest to be sent (serialisation stops somewhat past 256)."""


def showable(value: Any, what: str) -> tuple[Any, str | None]:
    """`value`, or (None, why) when it nests too deep for an answer to carry it."""
    if nesting_within(value, SHOW_DEPTH):
        return value, None
    return None, (
        f"{what} holds a value nested deeper than {SHOW_DEPTH} arrays or objects, which cannot "
        "be shown; the log keeps it: read it with agentlog show"
    )


def too_deep_message(what: str = "the JSON body") -> str:
    return f"{what} nests deeper than {MAX_DEPTH} arrays or objects"


def shown(model: BaseModel) -> tuple[Any, str | None]:
    """`model` as JSON builtins, or (None, why) when a stored value in it cannot be shown
    (one nested deeper than serialisation goes, written before the limit or by Python): the
    read answers for everything else rather than failing. A dump that succeeds is held to
    `SHOW_DEPTH` too: the answer nests it a few levels deeper, past what dumping it alone
    could tell."""
    try:
        dumped = model.model_dump(mode="json")
    except (ValueError, RecursionError) as exc:
        return None, (
            f"the state holds a value that cannot be shown ({type(exc).__name__}: "
            f"{str(exc)[:200]}); the log keeps it: read it with agentlog show"
        )
    return showable(dumped, "the state")
