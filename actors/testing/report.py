"""How the graph state machine compares states and says what went wrong."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentlog.events.errors import AgentlogError
from agentlog.projections import AgentState

IDS = frozenset({"id", "message_id", "call_id", "tool_call_id", "run_id"})
"""Keys whose values are ids: compared by where they first appear, not by value."""
TIMES = frozenset({"timestamp", "at", "created_at", "updated_at", "started_at", "duration_ms"})
"""Keys whose values are times: left out of a comparison across runs."""


def comparable(state: AgentState | None, *, exact: bool = False, internal: bool = True) -> Any:
    """`state` as plain data to compare: `exact` keeps ids and times (the same log, read
    twice); otherwise ids become their order of first appearance and times go (two runs of
    the same inputs), and so does the engine's `internal_data` (run ids and the like), as
    `internal=False` asks. The thread id always goes, so a fork compares with its source."""
    if state is None:
        return None
    data = state.model_dump(mode="json")
    meta = data.get("execution_meta", {})
    meta.pop("thread_id", None)
    if not (internal and exact):
        meta.pop("internal_data", None)
    if exact:
        return data
    seen: dict[str, int] = {}
    return _scrub(data, seen)


def _scrub(value: Any, seen: dict[str, int]) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in TIMES:
                continue
            if key in IDS and isinstance(item, str | int):
                out[key] = f"#{seen.setdefault(str(item), len(seen))}"
            else:
                out[key] = _scrub(item, seen)
        return out
    if isinstance(value, list):
        return [_scrub(item, seen) for item in value]
    return value


def difference(expected: Any, found: Any, path: str = "state", limit: int = 300) -> str:
    """The first place two comparable states differ, as one line."""
    if isinstance(expected, dict) and isinstance(found, dict):
        for key in [*expected, *(k for k in found if k not in expected)]:
            if expected.get(key, _MISSING) != found.get(key, _MISSING):
                return difference(expected.get(key), found.get(key), f"{path}.{key}", limit)
    if isinstance(expected, list) and isinstance(found, list):
        if len(expected) != len(found):
            return (
                f"{path} has {len(found)} items where {len(expected)} were expected: "
                f"expected {_short(expected, limit)}, found {_short(found, limit)}"
            )
        for i, (a, b) in enumerate(zip(expected, found, strict=True)):
            if a != b:
                return difference(a, b, f"{path}[{i}]", limit)
    return f"{path}: expected {_short(expected, limit)}, found {_short(found, limit)}"


_MISSING = object()


def _short(value: Any, limit: int) -> str:
    text = json.dumps(value, default=str, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class MachineFailure(AgentlogError, AssertionError):
    """An invariant the graph state machine checks was broken; the message names it, says
    where the states differ, lists the steps that led there, and gives them as a pytest test
    (`test`) that fails the same way when pasted into a test file."""

    def __init__(
        self,
        invariant: str,
        detail: str,
        script: Sequence[str],
        machine: type[Any],
        *,
        test: str = "",
    ) -> None:
        self.invariant = invariant
        self.detail = detail
        self.script = list(script)
        self.test = test
        lines = "\n".join(f"    {line}" for line in script) or "    (no steps)"
        factory = getattr(machine, "factory", None)
        name = getattr(factory, "__qualname__", "build")
        module = getattr(factory, "__module__", "your_module")
        text = (
            f"broken: {invariant}\n  {detail}\n"
            f"The steps that led here (shrunk by hypothesis when it could), against "
            f"app = {module}.{name}(store), config = {{'thread_id': 't'}}:\n{lines}"
        )
        if test:
            pasted = "\n".join(f"    {line}" if line else "" for line in test.splitlines())
            text += f"\nAs a test that fails the same way (paste it into a test file):\n\n{pasted}"
        super().__init__(text)


__all__ = ["IDS", "TIMES", "MachineFailure", "comparable", "difference"]
