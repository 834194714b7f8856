"""OpenTelemetry GenAI spans derived from the log (`pip install 'agentlog[otel]'`): see
`agentlog.actors.otel`.

    async with agentlog.otel.follow(store, tracer_provider=provider):
        ...
"""

from __future__ import annotations

from agentlog.actors.otel import *  # noqa: F403
from agentlog.actors.otel import __all__ as __all__
