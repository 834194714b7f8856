"""The API's routes, one router per concern; `create_app` includes them all."""

from agentlog.actors.http.routes import health, readers, records, runs, state, streams, threads

ROUTERS = [
    health.router,
    threads.router,
    state.router,
    records.router,
    runs.router,
    streams.router,
    readers.router,
]
"""In the order their paths are matched."""

__all__ = ["ROUTERS"]
