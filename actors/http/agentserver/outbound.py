"""Run webhooks: a run created with `webhook=<url>` has its result POSTed there when it ends,
as the Agent Server does (the run, its `values` at its end, its `error` when it failed),
signed per Standard Webhooks with the server's secret (`webhook-id` is the run id, the same
on every attempt, so a receiver drops a repeat).

The webhook is part of the run's acceptance (`trigger_accepted`), and every attempt is a
`webhook_sent` record on the runtime's thread: the runtime's ledger folds them into its
outbox, so a server that restarts sends the webhooks of the runs that ended undelivered, and
never one recorded delivered or given up. An attempt cut short by a crash is sent again
(the receiver sees the same `webhook-id`).

A target is checked before anything is written (an http(s) URL whose host resolves to
public addresses only, unless the server listens on loopback), and again before each attempt
(a name may resolve elsewhere by then).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx

from agentlog.actors.http.agentserver import wire
from agentlog.actors.http.errors import ApiError
from agentlog.actors.http.webhooks import secret_key, sign_standard
from agentlog.actors.runtime.facade import TriggerState
from agentlog.events.kinds import WebhookSent

if TYPE_CHECKING:
    from agentlog.actors.http.agentserver.facade import AgentServer

SECRET_ENV = "AGENTLOG_RUN_WEBHOOK_SECRET"
"""The environment variable `agentlog serve` reads the run webhooks' signing secret from."""
MAX_URL = 2048
WAIT_S = 365 * 24 * 3600.0
"""How long a webhook waits for its run to end (a stop ends the wait sooner)."""
MAX_ERROR = 300
"""How much of a failed attempt's error the log keeps."""

Sent = Literal["delivered", "failed", "given_up"]


@dataclass(frozen=True)
class RunWebhooks:
    """How a server sends run webhooks.

    `secret`: Standard Webhooks' `whsec_<base64>` (or any string, its UTF-8 bytes the key);
    None: sent unsigned. `private`: targets on loopback or private addresses are allowed
    (only for a server listening on loopback). An attempt that gets no 2xx answer within
    `timeout_s` is tried again after `first_delay_s`, doubling up to `max_delay_s`, at most
    `attempts` times in all."""

    secret: str | None = None
    private: bool = False
    attempts: int = 5
    first_delay_s: float = 1.0
    max_delay_s: float = 60.0
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.secret is not None:
            secret_key(self.secret)  # a malformed whsec_ secret is refused at once

    @classmethod
    def from_environment(cls, *, private: bool) -> RunWebhooks:
        return cls(secret=os.environ.get(SECRET_ENV) or None, private=private)

    def delay(self, attempt: int) -> float:
        return float(min(self.first_delay_s * 2 ** (attempt - 1), self.max_delay_s))


def _refused(url: str, why: str) -> ApiError:
    return ApiError(422, "invalid_webhook", f"webhook {url[:100]!r}: {why}")


async def check_target(url: str, *, private: bool) -> None:
    """Refuse (422 `invalid_webhook`) a webhook that is not an http(s) URL, or whose host
    resolves to a loopback, private, link-local or otherwise non-public address while
    `private` is False."""
    if len(url) > MAX_URL:
        raise _refused(url, f"longer than {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _refused(url, f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _refused(url, "a webhook is an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise _refused(url, "credentials in the URL are not sent; drop them")
    if private:
        return
    try:
        found = await asyncio.get_running_loop().getaddrinfo(
            parts.hostname, port or (443 if parts.scheme == "https" else 80)
        )
    except OSError as exc:
        raise _refused(url, f"its host does not resolve ({exc.strerror or exc})") from None
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        mapped = getattr(address, "ipv4_mapped", None)
        if not (mapped or address).is_global:
            raise _refused(
                url,
                f"its host resolves to {address}, not a public address: a server listening "
                "on loopback may call loopback and private targets; this one may not",
            )


class Outbox:
    """The run webhooks of one server: sent when their runs end, and at start for the runs
    that ended undelivered."""

    def __init__(self, srv: AgentServer, config: RunWebhooks | None = None) -> None:
        self.srv = srv
        self.config = config or RunWebhooks()
        self.sending: dict[str, asyncio.Task[None]] = {}

    async def check(self, url: str | None) -> None:
        if url is not None:
            await check_target(url, private=self.config.private)

    def watch(self, run: TriggerState) -> None:
        """Send the run's webhook (its acceptance names one) once the run ends."""
        url = run.accepted.webhook
        if url is not None:
            self._keep(run.id, self._send, url)

    def _keep(
        self, run_id: str, work: Callable[[str, str], Coroutine[Any, Any, None]], url: str
    ) -> None:
        """Run `work(run_id, url)` unless the run's webhook is being sent already."""
        if run_id not in self.sending:
            task = asyncio.ensure_future(work(run_id, url))
            self.sending[run_id] = task
            task.add_done_callback(lambda _: self.sending.pop(run_id, None))

    def start(self) -> None:
        """Take up every webhook the log says is still owed (its run ended or not)."""
        rt = self.srv.rt
        for run_id, url in rt.outbox().items():
            run = rt.known_run(run_id)
            if run is not None:
                self.watch(run)
            else:
                self._keep(run_id, self._forgotten, url)

    async def stop(self) -> None:
        tasks = list(self.sending.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _forgotten(self, run_id: str, url: str) -> None:
        await self.srv.rt.record_sent(
            WebhookSent(
                run_id=run_id,
                attempt=0,
                outcome="given_up",
                error="the run is no longer kept by the runtime: nothing to send",
            )
        )

    async def _send(self, run_id: str, url: str) -> None:
        rt = self.srv.rt
        run = rt.known_run(run_id)
        if run is None:
            return
        ended: dict[str, Any] | BaseException
        try:
            ended = await rt.wait_for(run_id, timeout=WAIT_S)
        except Exception as exc:
            ended = exc
        if not rt.run_now(run).done:
            return  # the runtime stopped first: the next server sends it
        body = json.dumps(self.payload(rt.run_now(run), ended), default=str).encode()
        config = self.config
        async with httpx.AsyncClient(timeout=config.timeout_s, follow_redirects=False) as http:
            for attempt in range(1, config.attempts + 1):
                status, error = await self._attempt(http, url, run_id, body)
                delivered = status is not None and 200 <= status < 300
                last = attempt == config.attempts
                retry_at = None if delivered or last else time.time() + config.delay(attempt)
                outcome: Sent = "delivered" if delivered else "given_up" if last else "failed"
                await rt.record_sent(
                    WebhookSent(
                        run_id=run_id,
                        attempt=attempt,
                        outcome=outcome,
                        status=status,
                        error=error,
                        retry_at=retry_at,
                    )
                )
                if retry_at is None:
                    return
                await asyncio.sleep(config.delay(attempt))

    async def _attempt(
        self, http: httpx.AsyncClient, url: str, run_id: str, body: bytes
    ) -> tuple[int | None, str | None]:
        """One POST: the receiver's status, or None and why there was none."""
        try:
            await check_target(url, private=self.config.private)
        except ApiError as exc:
            return None, str(exc)[:MAX_ERROR]
        stamp = int(time.time())
        headers = {
            "content-type": "application/json",
            "user-agent": "agentlog",
            "webhook-id": run_id,
            "webhook-timestamp": str(stamp),
        }
        if self.config.secret is not None:
            headers["webhook-signature"] = sign_standard(self.config.secret, run_id, stamp, body)
        try:
            answer = await http.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
        return answer.status_code, None if answer.is_success else f"HTTP {answer.status_code}"

    def payload(self, run: TriggerState, ended: dict[str, Any] | BaseException) -> dict[str, Any]:
        """The Agent Server's webhook body: the run, its status, when it ran, its values at
        its end (None when it did not complete or pause) and its error when it failed."""
        srv = self.srv
        body = srv.run(run)
        body["run_started_at"] = body["created_at"]
        body["run_ended_at"] = body["updated_at"]
        body["webhook_sent_at"] = wire.iso(time.time())
        if isinstance(ended, BaseException):
            body["values"] = None
            if run.outcome == "failed":
                body["error"] = f"{run.error_type or type(ended).__name__}: {run.message or ended}"
            return body
        accepted = run.accepted
        state = ended.get("state")
        values = srv.values(accepted.graph_id, state)
        if state is not None:
            pending = srv.interrupts(accepted.graph_id, state, accepted.thread_id)
            if pending:
                values["__interrupt__"] = pending
        body["values"] = values
        return body
