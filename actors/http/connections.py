"""Connections a client may hold on `agentlog serve`: uvicorn's HTTP/1.1 protocol (h11) with a
deadline for each request's headers and a cap on one client address's open connections, so
clients trickling bytes (or never sending any) cannot keep the server's descriptors.

uvicorn bounds only the idle time between requests (its keep-alive timer stops at the first
byte), so headers sent one byte every few seconds were waited for without end. Here a
connection whose request headers are not all in `header_timeout` seconds after it opened (or
after its previous answer) is closed; the body's own deadline is the app's (see `guard`).
A client address past `max_per_client` open connections has the new one closed at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

HEADER_TIMEOUT_S = 10.0
"""The default time a request's headers may take to arrive."""
MAX_PER_CLIENT = 100
"""The default number of connections one client address may hold open at once."""


def guarded_protocol(
    header_timeout: float = HEADER_TIMEOUT_S, max_per_client: int = MAX_PER_CLIENT
) -> type[asyncio.Protocol]:
    """A uvicorn `http` protocol class (h11) with these limits, for `uvicorn.Config(http=...)`."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    open_by_client: Counter[str] = Counter()

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol with a deadline on headers and a cap per client."""

        _deadline: asyncio.TimerHandle | None = None
        _counted: str | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            peer = self.client[0] if self.client else None
            if peer is not None:
                if open_by_client[peer] >= max_per_client:
                    transport.close()  # before a byte is read: it holds nothing
                    return
                open_by_client[peer] += 1
                self._counted = peer
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._counted is not None:
                open_by_client[self._counted] -= 1
                if open_by_client[self._counted] <= 0:
                    del open_by_client[self._counted]
                self._counted = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before:  # a request's headers are all in
                self._disarm()

        def on_response_complete(self) -> None:
            before = self.cycle
            super().on_response_complete()
            if self.cycle is before and not self.transport.is_closing():
                self._arm()  # the next request's headers have their own deadline

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
