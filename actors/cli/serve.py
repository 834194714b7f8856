"""`agentlog serve`: the runtime an application builds, over HTTP (uvicorn).

`--app` is what `agentlog runtime` takes (an `AgentRuntime` on `--db`, or `build(store)`).
Tokens come from `--tokens FILE` or the file `AGENTLOG_TOKENS_FILE` names (see
`agentlog.actors.http.tokens`); without tokens the server answers everyone as "local", so it refuses
any address but a loopback one, and it refuses unsigned webhook routes on one too. SIGINT or
SIGTERM drains it: no new connections, requests under way finish, then the runtime stops
(running steps commit, runs pause; the next runtime on the file resumes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from agentlog.actors.cli import CliError, _fail
from agentlog.actors.cli.logs import setup_logging
from agentlog.actors.cli.runtime import (
    AppRef,
    built,
    check_built,
    check_target,
    load,
    same_store,
    usage,
)
from agentlog.events import AgentlogError, EventStore, ThreadBusyError, open_store

if TYPE_CHECKING:
    from agentlog.actors.http.tokens import TokenBook
    from agentlog.actors.runtime import AgentRuntime

DRAIN_S = 10.0
"""How long a draining server lets requests under way (and open streams) finish."""


@dataclass(frozen=True)
class Guarding:
    """What `agentlog serve` lets through besides loopback clients (see
    `agentlog.actors.http.guard`)."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_per_client: int = 100


def loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refused(option: str, message: str) -> typer.BadParameter:
    """A usage error about `option`: one line, exit status 2."""
    return typer.BadParameter(message, param_hint=option)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` for the server, or `CliError` saying why it cannot be
    (the port taken, an address this machine does not have), before anything is opened."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = exc.strerror or str(exc)
        raise CliError(
            f"cannot listen on {host}:{port}: {why} (pick another --port, 0 for any free one, "
            "or an address of this machine for --host)"
        ) from None
    sock.set_inheritable(True)
    return sock


def hash_from_stdin() -> None:
    """Print the SHA-256 a token file stores for the token read from standard input."""
    from agentlog.actors.http.tokens import hash_token

    secret = sys.stdin.readline().strip()
    if not secret:
        _fail("no token on standard input: echo 'the-token' | agentlog serve --hash-token")
    print(hash_token(secret))


async def main(
    db: str,
    ref: AppRef,
    target: object,
    host: str,
    port: int,
    tokens: str | None,
    max_body: int,
    guard: Guarding | None = None,
    read_only: bool = False,
) -> None:
    from agentlog.actors.http import TokenBook

    book = TokenBook.load(tokens) if tokens else TokenBook.from_environment()
    if book is None and not loopback(host):
        raise refused(
            "--host",
            f"refusing to serve on {host!r} without tokens: anyone reaching it could run and "
            "read every graph. Give --tokens FILE (or AGENTLOG_TOKENS_FILE), or serve on "
            "127.0.0.1",
        )
    sock = listen(host, port)
    try:
        await _serve(db, ref, target, host, sock, book, max_body, guard or Guarding(), read_only)
    finally:
        sock.close()


async def _serve(
    db: str,
    ref: AppRef,
    target: object,
    host: str,
    sock: socket.socket,
    book: TokenBook | None,
    max_body: int,
    guard: Guarding,
    read_only: bool = False,
) -> None:
    import uvicorn

    from agentlog.actors.http import create_app
    from agentlog.actors.http.agentserver.outbound import SECRET_ENV, RunWebhooks
    from agentlog.actors.http.connections import guarded_protocol
    from agentlog.actors.runtime import AgentRuntime

    if isinstance(target, AgentRuntime):
        same_store(target, db, ref)
        store: EventStore = target.store
    else:
        store = open_store(db, readonly=read_only)  # read-only: an existing database only
    async with store:
        runtime = (
            target
            if isinstance(target, AgentRuntime)
            else check_built(await built(target, store, ref), store, ref)  # type: ignore[arg-type]
        )
        unsigned = [e.id for e in runtime.entries.values() if e.trigger == "webhook" and e.unsigned]
        if unsigned and not loopback(host):
            raise refused(
                "--host",
                f"refusing to serve the unsigned webhook route(s) {', '.join(unsigned)} on "
                f"{host!r}: give them secrets, or serve on 127.0.0.1",
            )
        hosts = [*guard.allowed_hosts]
        if host not in ("0.0.0.0", "::", ""):
            hosts.append(host)  # a client reaching it by its address names that address
        try:  # the secret runs' webhooks are signed with; loopback and private targets
            # only for a server on loopback
            outbound = RunWebhooks.from_environment(private=loopback(host))
        except AgentlogError as exc:
            raise CliError(f"{SECRET_ENV}: {exc}") from None
        app = create_app(
            runtime,
            run_webhooks=outbound,
            tokens=book,
            max_body=max_body,
            allowed_hosts=hosts,
            allowed_origins=guard.allowed_origins,
            body_timeout=guard.body_timeout,
            read_only=read_only,
        )
        server = _server_class()(
            uvicorn.Config(
                app,
                http=guarded_protocol(guard.header_timeout, guard.max_per_client),
                # the level and handler `agentlog serve --log-level` set (`cli.logs`); the
                # access log is uvicorn's, at info
                log_config=None,
                log_level=logging.getLogger("agentlog").getEffectiveLevel(),
                access_log=True,
                lifespan="on",
                timeout_graceful_shutdown=int(DRAIN_S),
            )
        )
        server.draining = app.state.draining
        try:  # started here, not by the app: another runtime on the file is one line, exit 1
            if not read_only:  # a read-only server runs nothing, and writes nothing
                await runtime.start()
        except ThreadBusyError as exc:
            raise CliError(str(exc)) from None
        announce = asyncio.ensure_future(_announce(server, db, book is not None))
        try:
            await server.serve(sockets=[sock])
        finally:
            announce.cancel()
            if not read_only:
                await _stop(runtime)


async def _stop(runtime: AgentRuntime) -> None:
    """Stop the runtime after the drain (running steps commit, runs pause); a signal
    meanwhile cancels what still runs, as for `agentlog runtime`."""
    loop = asyncio.get_running_loop()
    again = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, again.set)
    stops = [asyncio.ensure_future(runtime.stop())]
    second = asyncio.ensure_future(again.wait())
    try:
        done, _ = await asyncio.wait({stops[0], second}, return_when=asyncio.FIRST_COMPLETED)
        if second in done and not stops[0].done():
            stops.append(asyncio.ensure_future(runtime.stop(cancel=True)))
        await asyncio.gather(*stops)
    finally:
        second.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _server_class() -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, draining on SIGINT/SIGTERM and then exiting with status 0
        (uvicorn would raise the signal again once drained, ending the process by it); its
        drain ends the app's open event streams at once (`draining`)."""

        draining: asyncio.Event | None = None

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.draining is not None:
                self.draining.set()
            await super().shutdown(sockets)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.handle_exit, sig, None)
            try:
                yield
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)

    return Server


async def _announce(server: Any, db: str, tokens: bool) -> None:
    """One JSON line once the server listens: where (the real port, when 0 was asked)."""
    while not server.started:
        await asyncio.sleep(0.02)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    where = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed in a URL
    print(
        json.dumps({"serving": f"http://{where}:{port}", "db": db, "tokens": tokens}),
        flush=True,
    )


def run_serve(
    db: str,
    app_ref: str | None,
    host: str,
    port: int,
    tokens: str | None,
    max_body: int,
    hash_token: bool,
    *,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    header_timeout: float = 10.0,
    body_timeout: float = 30.0,
    max_per_client: int = 100,
    log_level: str = "warning",
    log_json: bool = False,
) -> None:
    """`agentlog serve` (its options are declared in `agentlog.actors.cli`)."""
    if hash_token:
        hash_from_stdin()
        return
    if app_ref is None:
        raise usage("--app MODULE:ATTRIBUTE names the runtime to serve")
    if not 0 <= port <= 65535:
        raise refused("--port", f"a port is 0 to 65535 (0: any free one), got {port}")
    if max_body < 1:
        raise refused("--max-body", f"the largest request body is 1 byte or more, got {max_body}")
    for option, seconds in (("--header-timeout", header_timeout), ("--body-timeout", body_timeout)):
        if not 0 < seconds <= 3600:
            raise refused(option, f"a number of seconds above 0, at most 3600, got {seconds:g}")
    if max_per_client < 1:
        raise refused("--client-connections", f"one connection or more, got {max_per_client}")
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        _fail("agentlog serve needs the serve extra: pip install 'agentlog[serve]'")
    ref = AppRef.parse(app_ref)
    setup_logging(log_level, log_json)
    try:
        target = load(ref)
        check_target(target, ref)
        guard = Guarding(
            tuple(allowed_hosts), tuple(allowed_origins), header_timeout, body_timeout,
            max_per_client,
        )  # fmt: skip
        asyncio.run(main(db, ref, target, host, port, tokens, max_body, guard))
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))
