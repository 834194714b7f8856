"""`agentlog ui --db FILE`: the viewer (`/ui`) on a database, read-only, on loopback.

The database must exist: it is opened read-only (nothing is created or changed; a missing
path is refused, not made). Without `--app`, each graph the log names is served by a
stand-in that only reads (its threads' states fold as `AgentState`); with `--app`, the
application's own graphs read them. Every request acts as "local" with the `read` right
only, so the viewer's actions (fork, approve, cancel) are refused with 403.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from agentlog.events import AgentlogError, EventStore


def register(app: typer.Typer) -> None:
    """Add the command to the `agentlog` command line."""
    app.command("ui")(ui_command)


def ui_command(
    db: Annotated[
        str,
        typer.Option(
            "--db",
            "--dsn",
            help="An existing agentlog database: a SQLite file's path, or a URL as for "
            "`agentlog serve` (opened read-only; nothing is created).",
        ),
    ] = "agentlog.db",
    port: Annotated[int, typer.Option(help="The port on 127.0.0.1 (0: any free one).")] = 8123,
    app_ref: Annotated[
        str | None,
        typer.Option(
            "--app",
            metavar="MODULE:ATTRIBUTE",
            help="The application whose graphs read the threads (as for `agentlog serve`); "
            "default: a stand-in per graph the log names.",
        ),
    ] = None,
) -> None:
    """Serve the time-travel viewer on a database, read-only, at http://127.0.0.1:PORT/ui."""
    from agentlog.actors.cli import CliError, _fail
    from agentlog.actors.cli.logs import setup_logging
    from agentlog.actors.cli.runtime import AppRef, check_target, load
    from agentlog.actors.cli.serve import main, refused

    if not 0 <= port <= 65535:
        raise refused("--port", f"a port is 0 to 65535 (0: any free one), got {port}")
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        _fail("agentlog ui needs the serve extra: pip install 'agentlog[serve]'")
    setup_logging("warning", False)
    ref = AppRef.parse(app_ref or "agentlog.actors.cli.ui:stand_in")
    try:
        target = load(ref)
        check_target(target, ref)
        asyncio.run(main(db, ref, target, "127.0.0.1", port, None, 1024, read_only=True))
    except (CliError, AgentlogError) as exc:
        _fail(str(exc))


async def stand_in(store: EventStore) -> Any:
    """A runtime with a graph per graph id the log names, none of which runs: enough to read
    each thread's state, history and records."""
    from agentlog.actors import END, StateGraph
    from agentlog.actors.runtime import AgentRuntime
    from agentlog.actors.runtime.listeners import graph_of_thread

    cache: dict[str, str | None] = {}
    named = {await graph_of_thread(store, t, {}, cache) for t in await store.threads()}
    runtime = AgentRuntime(store)
    for graph_id in sorted(g for g in named if g):
        graph: StateGraph[Any] = StateGraph(name=graph_id)
        graph.add_node("read_only", _refuse)
        graph.set_entry_point("read_only")
        graph.add_edge("read_only", END)
        runtime.add_graph(graph_id, graph.compile(store))
    return runtime


def _refuse(state: Any) -> dict[str, Any]:
    from agentlog.actors.cli import CliError

    raise CliError("agentlog ui serves a database read-only: its graphs do not run")
