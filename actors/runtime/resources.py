"""Runtime-level resources (hive's `llm`, `tools`, `tool_executor`, accounts and
`tool_provider_map`) and checkpoint settings: kept for the program, and named (`names()`)
without a key or a token."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlog.actors.runtime.journal import RuntimeJournal
from agentlog.actors.runtime.spec import RegistrationError
from agentlog.events.kinds import ResourcesNamed


def named(value: Any) -> str | None:
    """A name for a resource (a model, a tool, an executor): its model or name, never its
    other attributes (where keys live)."""
    if value is None:
        return None
    for attr in ("model", "model_name", "name", "__name__"):
        found = getattr(value, attr, None)
        if isinstance(found, str) and found:
            return found if attr == "__name__" else f"{type(value).__name__}:{found}"
    return type(value).__name__


@dataclass(frozen=True)
class CheckpointConfig:
    """hive's checkpoint settings. Every step is committed to the log, so a run always
    resumes from its last committed step: `enabled=False` is refused (a run without its log
    could not be resumed); `snapshot_every` is how many records a thread's snapshot spans
    (`compile(..., **config.compile_options())`)."""

    enabled: bool = True
    snapshot_every: int | None = None

    def __post_init__(self) -> None:
        if self.enabled is not True:
            raise RegistrationError(
                "CheckpointConfig(enabled=False): agentlog records every step in the log, "
                "which is how a run resumes; leave checkpointing enabled"
            )

    def compile_options(self) -> dict[str, Any]:
        return {} if self.snapshot_every is None else {"snapshot_every": self.snapshot_every}


@dataclass(frozen=True)
class Resources:
    """What a runtime's programs share: kept as given (`runtime.resources.llm`) and named
    without secrets (`names()`)."""

    llm: Any = None
    tools: Sequence[Any] = ()
    tool_executor: Any = None
    accounts: Sequence[Mapping[str, Any]] = ()
    """Connected accounts: each recorded by its "name" (or "provider") only."""
    tool_provider_map: Mapping[str, str] = field(default_factory=dict)
    """Tool name -> the provider (account) its calls go to (hive's credential routing)."""
    checkpoint: CheckpointConfig | None = None

    def names(self) -> dict[str, Any]:
        checkpoint = self.checkpoint
        return {
            "llm": named(self.llm),
            "tools": [named(t) for t in self.tools],
            "tool_executor": named(self.tool_executor),
            "accounts": [str(a.get("name") or a.get("provider") or "?") for a in self.accounts],
            "tool_provider_map": {str(k): str(v) for k, v in self.tool_provider_map.items()},
            "checkpoint": None if checkpoint is None else {
                "enabled": checkpoint.enabled, "snapshot_every": checkpoint.snapshot_every,
            },
        }  # fmt: skip


async def record_names(resources: Resources, journal: RuntimeJournal, *, lone: bool) -> None:
    """Record the resources' names on the runtime thread when they differ from what the log
    last holds (a restart with the same resources writes nothing); a lone runtime does, as
    the one writer of its own settings, never a worker."""
    names = resources.names()
    last = journal.ledger.resources or Resources().names()  # none given, none recorded: quiet
    if lone and names != last:
        await journal.record([ResourcesNamed(names=names)])


__all__ = ["CheckpointConfig", "Resources", "named", "record_names"]
