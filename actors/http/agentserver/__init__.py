"""LangGraph's Agent Server API over the runtime, wire-compatible, so LangGraph's own clients
(`langgraph-sdk`, `RemoteGraph`) talk to `agentlog serve` unchanged: assistants, threads,
runs and their streams. `wire` converts at the edge; `facade` reads the runtime; the route
modules are thin. docs/agent-server.md lists what differs."""

from agentlog.actors.http.agentserver import assistants, crons, runs, store, threads

ROUTERS = [assistants.router, threads.router, crons.router, runs.router, store.router]
"""In the order their paths are matched."""

__all__ = ["ROUTERS"]
