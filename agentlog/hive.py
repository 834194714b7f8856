"""Every name a hive program's runtime needs, in one module: a port turns
`from framework.runtime.agent_runtime import AgentRuntime` (and its neighbours) into
`from agentlog.hive import AgentRuntime`. The runtime answers in hive's shapes; agentlog's
own `agentlog.actors.AgentRuntime` runs underneath (`runtime.runtime`)."""

from __future__ import annotations

from agentlog.actors.runtime.goals import Constraint, Goal, SuccessCriterion
from agentlog.actors.runtime.hive import (
    AgentRuntime,
    AgentRuntimeConfig,
    CheckpointConfig,
    EntryPointSpec,
    ExecutionResult,
    ExecutionStream,
    create_agent_runtime,
)

__all__ = [
    "AgentRuntime",
    "AgentRuntimeConfig",
    "CheckpointConfig",
    "Constraint",
    "EntryPointSpec",
    "ExecutionResult",
    "ExecutionStream",
    "Goal",
    "SuccessCriterion",
    "create_agent_runtime",
]
