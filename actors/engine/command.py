"""`Command`: what a node (or a tool) returns to update the state and choose where to go."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

N = TypeVar("N", bound=str)


@dataclass(frozen=True)
class Command(Generic[N]):
    """What a node may return to update the state and choose where to go next.

    `resume` is the value handed to an interrupted node when a run is resumed with it. A node
    annotated `-> Command[Literal["a", "b"]]` declares that it goes to "a" or "b", and needs
    no edge of its own.
    """

    update: Any = None
    goto: N | None = None
    resume: Any = None
