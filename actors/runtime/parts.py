"""What runs beside a runtime and lives exactly as long as it: a relay to a broker, a live
span follower. A part is any async context manager; the runtime enters it once it has
started and leaves it after its own last commit. A part that reads the log keeps a durable
cursor, so what it had not sent when it left, it sends on its next start."""

from __future__ import annotations

import contextlib
from contextlib import AbstractAsyncContextManager
from typing import Any

from agentlog.actors.runtime.spec import RegistrationError

__all__ = ["Parts"]


class Parts:
    """The runtime's parts, entered in the order attached and left in the reverse order."""

    def __init__(self) -> None:
        self.attached: list[AbstractAsyncContextManager[Any]] = []
        self._stack: contextlib.AsyncExitStack | None = None

    async def attach(self, part: AbstractAsyncContextManager[Any], *, running: bool) -> None:
        if not (hasattr(part, "__aenter__") and hasattr(part, "__aexit__")):
            raise RegistrationError(
                f"attach takes an async context manager (a Relay, agentlog.otel.follow(...)), "
                f"got {type(part).__name__}"
            )
        if any(p is part for p in self.attached):
            raise RegistrationError(f"this {type(part).__name__} is attached already")
        self.attached.append(part)
        if running and self._stack is not None:
            await self._stack.enter_async_context(part)

    async def start(self) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            for part in self.attached:
                await stack.enter_async_context(part)
        except BaseException:
            await stack.aclose()  # the parts entered so far leave again
            raise
        self._stack = stack

    async def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
