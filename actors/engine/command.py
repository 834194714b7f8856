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


@dataclass(frozen=True)
class Send:
    """Run `node` in the next step with `arg` as its input instead of the state.

    A condition (or a node's `Command(goto=...)`) returns a list of them to map one node
    over many inputs: each `Send` is one branch of the next step, all run concurrently and
    their updates merged by the state's reducers, in the order the `Send`s were given.
    `arg` is recorded in the log (as JSON-like data), and the node receives it as recorded,
    so a run resumed after a crash hands it the same input.
    """

    node: str
    arg: Any = None
