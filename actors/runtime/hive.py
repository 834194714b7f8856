"""hive's `AgentRuntime`, by hive's names, signatures and result shapes, over agentlog's
runtime: a hive program ports by its imports (`from agentlog.hive import AgentRuntime,
EntryPointSpec, ...`).

Where hive raises or returns differently from agentlog's own runtime, this facade answers as
hive does: `trigger_and_wait` returns None on timeout and a failed `ExecutionResult` on
failure, `inject_input(node_id, content)` says whether a node waiting there took the input,
`unregister_entry_point` of an unknown id returns False. Everything else is agentlog's: the
runs, their records and their recovery are the wrapped runtime's (`.runtime`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlog.actors.engine.errors import UnreadResumeValueError
from agentlog.actors.runtime.goals import Goal
from agentlog.actors.runtime.graphs import GraphRegistration
from agentlog.actors.runtime.manager import StateManager
from agentlog.actors.runtime.resources import CheckpointConfig, Resources
from agentlog.actors.runtime.runtime import AgentRuntime as Runtime
from agentlog.actors.runtime.spec import (
    EntryPoint,
    RegistrationError,
    RunNotWaitingError,
    RuntimeConfig,
    UnknownEntryPointError,
    UnknownRunError,
)
from agentlog.events import EventStore, SQLiteEventStore
from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import (
    InterruptRaised,
    NodeEntered,
    RunCompleted,
    RunFailed,
    RunStarted,
)

_TRIGGERS = {"manual": "api", "api": "api", "event": "event", "timer": "timer"}
_EVENT_TYPES = {
    "execution_started": RunStarted.KIND,
    "execution_completed": RunCompleted.KIND,
    "execution_failed": RunFailed.KIND,
    "execution_paused": InterruptRaised.KIND,
}
"""hive's event type names and the kinds of record they are here (others are kinds)."""


@dataclass
class ExecutionResult:
    """How a run ended, in hive's shape."""

    success: bool
    output: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    steps_executed: int = 0
    total_tokens: int = 0
    path: list[str] = field(default_factory=list)
    paused_at: str | None = None
    session_state: dict[str, Any] = field(default_factory=dict)
    execution_id: str = ""


@dataclass
class AgentRuntimeConfig:
    """hive's runtime configuration, mapped to `RuntimeConfig` (`runtime_config()`)."""

    max_concurrent_executions: int = 100
    execution_result_max: int = 1000
    execution_result_ttl_seconds: float | None = None
    timezone: str | None = None

    def runtime_config(self) -> RuntimeConfig:
        return RuntimeConfig(
            max_concurrent_runs=self.max_concurrent_executions,
            keep_results=self.execution_result_max,
            keep_results_ttl_s=self.execution_result_ttl_seconds,
            timezone=self.timezone,
        )


@dataclass(frozen=True)
class EntryPointSpec:
    """hive's entry point: `trigger_type` is manual/api, event, timer or webhook;
    `trigger_config` holds hive's keys (event_types, filter_graph, filter_node,
    filter_stream, exclude_own_graph, cron, interval_minutes, run_immediately, path,
    secret, methods)."""

    id: str
    name: str = ""
    entry_node: str | None = None
    trigger_type: str = "manual"
    trigger_config: Mapping[str, Any] = field(default_factory=dict)
    isolation_level: str = "shared"
    priority: int = 0
    max_concurrent: int | None = None

    def entry_point(self, graph_id: str) -> EntryPoint:
        """This spec as agentlog's `EntryPoint` of `graph_id`."""
        config = dict(self.trigger_config or {})
        kind = self.trigger_type
        common: dict[str, Any] = {
            "id": self.id,
            "graph_id": graph_id,
            "name": self.name,
            "entry_node": self.entry_node or None,
            "isolation": self.isolation_level,
            "priority": self.priority,
            "max_concurrent": self.max_concurrent,
        }
        if kind == "event":
            types = [_EVENT_TYPES.get(t, t) for t in config.get("event_types") or []]
            webhook = "webhook_received" in types
            common.update(
                kinds=None if webhook else types or None,
                from_graph=None if webhook else config.get("filter_graph"),
                node=None if webhook else config.get("filter_node"),
                webhook=config.get("filter_stream") if webhook else None,
                include_own=not webhook and not config.get("exclude_own_graph", False),
                session="primary",
            )
        elif kind == "timer":
            minutes = config.get("interval_minutes")
            common.update(
                cron=config.get("cron"),
                interval_s=None if config.get("cron") or minutes is None else minutes * 60,
                run_immediately=bool(config.get("run_immediately", False)),
                session="primary",
            )
        elif kind == "webhook":
            secret = config.get("secret")
            common.update(
                path=config.get("path"),
                methods=config.get("methods", ("POST",)),
                secrets=[secret] if secret else [],
                unsigned=not secret,
            )
        elif kind not in _TRIGGERS:
            raise RegistrationError(
                f"entry point {self.id!r}: trigger_type is manual, api, event, timer or "
                f"webhook, got {kind!r}"
            )
        return EntryPoint(trigger=_TRIGGERS.get(kind, kind), **common)  # type: ignore[arg-type]


class ExecutionStream:
    """One entry point's runs, as hive's stream shows them."""

    def __init__(self, facade: AgentRuntime, entry: EntryPoint) -> None:
        self.facade, self.entry_spec, self.stream_id = facade, entry, entry.id

    @property
    def active_execution_ids(self) -> list[str]:
        runtime = self.facade.runtime
        return [
            s.accepted.thread_id
            for s in runtime.ledger.triggers.values()
            if s.accepted.entry_point == self.stream_id and not s.done
        ]

    def get_stats(self) -> dict[str, Any]:
        counts = self.facade.runtime.stats()["entry_points"].get(self.stream_id, {})
        return {
            "stream_id": self.stream_id,
            "entry_node": self.entry_spec.entry_node,
            "trigger_type": self.entry_spec.trigger,
            "active_executions": counts.get("active", 0),
            **{k: v for k, v in counts.items() if k != "active"},
        }

    def get_result(self, execution_id: str) -> ExecutionResult | None:
        return self.facade.get_execution_result(self.stream_id, execution_id)

    async def wait_for_completion(
        self, execution_id: str, timeout: float | None = None
    ) -> ExecutionResult | None:
        return await self.facade._wait(execution_id, timeout)

    async def cancel_execution(self, execution_id: str) -> bool:
        return await self.facade.cancel_execution(self.stream_id, execution_id)


class AgentRuntime:
    """hive's `AgentRuntime(graph, goal, storage_path, ...)` over agentlog's runtime.

    `graph` is a `StateGraph` (compiled here on the store at `storage_path`, a directory
    holding `agentlog.db`, or an opened `EventStore`) or a graph compiled on that store.
    `llm`, `tools`, `tool_executor`, `accounts_data` and `tool_provider_map` are kept for
    the program (`runtime.llm`, ...); `resources()` names them without their secrets.
    """

    def __init__(
        self,
        graph: Any,
        goal: Goal | None,
        storage_path: str | Path | EventStore,
        llm: Any = None,
        tools: Sequence[Any] | None = None,
        tool_executor: Callable[..., Any] | None = None,
        config: AgentRuntimeConfig | None = None,
        runtime_log_store: Any = None,
        checkpoint_config: CheckpointConfig | None = None,
        graph_id: str | None = None,
        accounts_prompt: str = "",
        accounts_data: list[dict[str, Any]] | None = None,
        tool_provider_map: dict[str, str] | None = None,
    ) -> None:
        if isinstance(storage_path, EventStore):
            store = storage_path
        else:
            Path(storage_path).mkdir(parents=True, exist_ok=True)
            store = SQLiteEventStore(Path(storage_path) / "agentlog.db")
        self.store = store
        self.config = config or AgentRuntimeConfig()
        self.checkpoint_config = checkpoint_config or CheckpointConfig()
        resources = Resources(
            llm=llm,
            tools=list(tools or []),
            tool_executor=tool_executor,
            accounts=list(accounts_data or []),
            tool_provider_map=dict(tool_provider_map or {}),
            checkpoint=self.checkpoint_config,
        )
        self.runtime = Runtime(store, self.config.runtime_config(), resources=resources)
        app = self._compiled(graph)
        self.runtime.add_graph_with(graph_id or "primary", app, goal=goal)
        self.graph, self.goal = app, goal
        self.llm, self.tools, self.tool_executor = llm, resources.tools, tool_executor
        self.accounts_prompt, self.accounts_data = accounts_prompt, accounts_data
        self.tool_provider_map = resources.tool_provider_map
        self.runtime_log_store = runtime_log_store
        self._results: OrderedDict[str, tuple[ExecutionResult, float]] = OrderedDict()

    def resources(self) -> dict[str, Any]:
        """The runtime-level resources by name (as the log records them): the model, the
        tools, the executor, the accounts and which provider each tool's calls go to."""
        return self.runtime.resources.names()

    def _compiled(self, graph: Any) -> Any:
        if hasattr(graph, "aget_state"):
            return graph  # compiled already (on this store: the runtime checks)
        return graph.compile(checkpointer=self.store, **self.checkpoint_config.compile_options())

    # ---- entry points and life ----------------------------------------------------------

    def register_entry_point(self, spec: EntryPointSpec | EntryPoint) -> None:
        entry = spec if isinstance(spec, EntryPoint) else spec.entry_point(self.graph_id)
        self.runtime.register_entry_point(entry)

    def unregister_entry_point(self, entry_point_id: str) -> bool:
        """True once removed, False for an id nobody registered (hive's)."""
        try:
            return self.runtime.unregister_entry_point(entry_point_id)
        except UnknownEntryPointError:
            return False

    def get_entry_points(self) -> list[EntryPoint]:
        return self.runtime.entry_points()

    async def start(self) -> None:
        await self.runtime.start()

    async def stop(self) -> None:
        await self.runtime.stop()

    @property
    def is_running(self) -> bool:
        return self.runtime.is_running

    # ---- runs ---------------------------------------------------------------------------

    async def trigger(
        self,
        entry_point_id: str,
        input_data: Any,
        correlation_id: str | None = None,
        session_state: dict[str, Any] | None = None,
    ) -> str:
        """Start a run and return its execution id (its thread) at once."""
        return await self.runtime.trigger(
            entry_point_id, input_data, correlation_id=correlation_id, session_state=session_state
        )

    async def trigger_and_wait(
        self,
        entry_point_id: str,
        input_data: Any,
        timeout: float | None = None,
        session_state: dict[str, Any] | None = None,
    ) -> ExecutionResult | None:
        """Start a run and wait for it: its result, a failed result when it failed or was
        cancelled, None when `timeout` passed first (the run goes on)."""
        execution_id = await self.trigger(entry_point_id, input_data, session_state=session_state)
        return await self._wait(execution_id, timeout)

    async def _wait(self, execution_id: str, timeout: float | None) -> ExecutionResult | None:
        try:
            result = await self.runtime.wait(execution_id, timeout=timeout)
        except TimeoutError:
            return None
        except AgentlogError as exc:
            failed = ExecutionResult(
                success=False,
                error=f"{type(exc).__name__}: {exc}",
                execution_id=execution_id,
                path=await self._path(execution_id),
            )
            self._keep(failed)
            return failed
        return await self._result(execution_id, result)

    async def _path(self, execution_id: str) -> list[str]:
        state = self.runtime.ledger.latest_on(execution_id)
        run_id = state.id if state is not None else None
        return [
            r.event.node
            async for r in self.store.read(execution_id)
            if isinstance(r.event, NodeEntered) and r.run_id == run_id
        ]

    async def _result(self, execution_id: str, result: dict[str, Any]) -> ExecutionResult:
        shaped = self._shaped(execution_id, result, await self._path(execution_id))
        self._keep(shaped)
        return shaped

    def _keep(self, result: ExecutionResult) -> None:
        """Keep a result for `get_execution_result`, up to `execution_result_max` of them
        and for `execution_result_ttl_seconds` (hive's retention)."""
        now = self.runtime.clock()
        self._results[result.execution_id] = (result, now)
        self._results.move_to_end(result.execution_id)
        ttl = self.config.execution_result_ttl_seconds
        while self._results and (
            len(self._results) > self.config.execution_result_max
            or (ttl is not None and next(iter(self._results.values()))[1] < now - ttl)
        ):
            self._results.popitem(last=False)

    def _shaped(
        self, execution_id: str, result: dict[str, Any], path: list[str]
    ) -> ExecutionResult:
        state = result.get("state")
        output: dict[str, Any] = {}
        paused = None
        if state is not None:
            output = state.model_dump(mode="json", exclude={"execution_meta", "context"})
            paused = state.execution_meta.interrupted_node
        replies = [m.text() for m in result.get("messages", []) if m.role == "assistant"]
        if replies:
            output["response"] = replies[-1]
        return ExecutionResult(
            success=result.get("status") in ("completed", "interrupted_before", "interrupted"),
            output=output,
            steps_executed=len(path),
            total_tokens=int((result.get("token_usage") or {}).get("total_tokens", 0)),
            path=path,
            paused_at=paused,
            session_state={"resume_session_id": execution_id, "paused_at": paused},
            execution_id=execution_id,
        )

    def get_execution_result(
        self, entry_point_id: str, execution_id: str
    ) -> ExecutionResult | None:
        kept = self._results.get(execution_id)
        ttl = self.config.execution_result_ttl_seconds
        if kept is not None and (ttl is None or kept[1] >= self.runtime.clock() - ttl):
            return kept[0]
        try:
            ended = self.runtime.get_execution_result(entry_point_id, execution_id)
        except UnknownEntryPointError:
            return None
        if ended is None:
            return None
        if ended.get("state") is not None:  # kept as `wait` returned it: its output too
            return self._shaped(execution_id, ended, [])
        error = ended.get("error")
        return ExecutionResult(
            success=bool(ended.get("success")),
            error=None if not error else f"{error.get('type')}: {error.get('message')}",
            execution_id=execution_id,
        )

    async def cancel_execution(self, entry_point_id: str, execution_id: str) -> bool:
        try:
            return await self.runtime.cancel_execution(entry_point_id, execution_id)
        except UnknownEntryPointError:
            return False

    async def inject_input(self, node_id: str, content: Any, graph_id: str | None = None) -> bool:
        """Answer the run paused at `node_id` (in `graph_id`, else the active graph first,
        then any): True once a run waiting there took `content`, False when none did."""
        runtime = self.runtime
        first = graph_id or runtime.active_graph_id
        threads = sorted(
            (t for t, s in _latest(runtime) if s.done and s.outcome == "interrupted"),
            key=lambda t: runtime.ledger.graph_of.get(t) != first,
        )
        for thread in threads:
            app = runtime.graphs.get(runtime.ledger.graph_of.get(thread, ""))
            if app is None:
                continue
            state = await app.app.aget_state({"thread_id": thread})
            if state.execution_meta.interrupted_node != node_id:
                continue
            try:
                await runtime.inject_input(thread, content)
            except (RunNotWaitingError, UnreadResumeValueError, UnknownRunError):
                continue
            return True
        return False

    # ---- graphs ---------------------------------------------------------------------------

    async def add_graph(
        self,
        graph_id: str,
        graph: Any,
        goal: Goal | None,
        entry_points: Mapping[str, EntryPointSpec | EntryPoint],
        storage_subpath: str | None = None,
    ) -> None:
        """A secondary graph with its goal and entry points (`graph_id::ep`); while running
        too. `storage_subpath` is accepted for hive's signature: one log holds every graph."""
        app = self._compiled(graph)
        entries = {
            local: e if isinstance(e, EntryPoint) else e.entry_point(graph_id)
            for local, e in entry_points.items()
        }
        self.runtime.add_graph_with(graph_id, app, goal=goal, entry_points=entries)

    async def remove_graph(self, graph_id: str) -> None:
        if graph_id == self.graph_id:
            raise RegistrationError("the primary graph cannot be removed")
        self.runtime.remove_graph(graph_id)

    def list_graphs(self) -> list[str]:
        primary = self.graph_id
        return [primary, *(g for g in self.runtime.list_graphs() if g != primary)]

    @property
    def graph_id(self) -> str:
        return self.runtime.graph_id or "primary"

    @property
    def active_graph_id(self) -> str:
        return self.runtime.active_graph_id or self.graph_id

    @active_graph_id.setter
    def active_graph_id(self, value: str) -> None:
        self.runtime.active_graph_id = value

    def get_graph_registration(self, graph_id: str) -> GraphRegistration | None:
        return self.runtime.get_graph_registration(graph_id)

    @property
    def intro_message(self) -> str:
        return self.runtime.intro_message

    @intro_message.setter
    def intro_message(self, value: str) -> None:
        self.runtime.intro_message = value

    @property
    def user_idle_seconds(self) -> float:
        return self.runtime.user_idle_seconds

    # ---- watching -----------------------------------------------------------------------

    async def get_goal_progress(self) -> dict[str, Any]:
        goal = self.runtime.graph_goal(self.graph_id)
        return await self.runtime.goal_progress(goal)

    def get_stream(self, entry_point_id: str) -> ExecutionStream | None:
        entry = self.runtime.entries.get(entry_point_id)
        return None if entry is None else ExecutionStream(self, entry)

    def subscribe_to_events(
        self,
        event_types: Sequence[str],
        handler: Callable[..., Any],
        filter_stream: str | None = None,
        filter_graph: str | None = None,
    ) -> str:
        return self.runtime.subscribe_to_events(
            list(event_types), handler, filter_stream=filter_stream, filter_graph=filter_graph
        )

    def unsubscribe_from_events(self, subscription_id: str) -> bool:
        return self.runtime.unsubscribe_from_events(subscription_id)

    def get_stats(self) -> dict[str, Any]:
        """hive's sections: running, entry points, streams, the goal, the outcome
        aggregator, the event bus and the state manager."""
        stats = self.runtime.stats()
        facts = self.runtime.facts
        return {
            "running": self.is_running,
            "entry_points": len(self.runtime.entries),
            "streams": {
                e: ExecutionStream(self, x).get_stats() for e, x in self.runtime.entries.items()
            },
            "goal_id": self.goal.id if self.goal is not None else None,
            "outcome_aggregator": {
                "goals": list(self.runtime.goals),
                "outcomes": sum(m.count for m in facts.metrics.values()),
                "metrics": sorted({name for _, name in facts.metrics}),
            },
            "event_bus": {
                "events_appended": stats["events_appended"],
                "subscribers": len(stats["subscriber_lag"]),
                "subscriber_lag": stats["subscriber_lag"],
                "commit_latency_ms": stats["commit_latency_ms"],
            },
            "state_manager": self.state_manager.get_stats(),
        }

    @property
    def state_manager(self) -> StateManager:
        return self.runtime.state_manager

    @property
    def event_bus(self) -> Runtime:
        """The log is the bus: the runtime's `subscribe` and `subscribe_to_events`."""
        return self.runtime

    @property
    def webhook_server(self) -> None:
        """Webhooks are entry points served by the HTTP app (`agentlog serve`)."""
        return None


def _latest(runtime: Runtime) -> list[tuple[str, Any]]:
    found = []
    for thread in list(runtime.ledger.by_thread):
        state = runtime.ledger.latest_on(thread)
        if state is not None:
            found.append((thread, state))
    return found


def create_agent_runtime(
    graph: Any,
    goal: Goal | None,
    storage_path: str | Path | EventStore,
    entry_points: Sequence[EntryPointSpec | EntryPoint],
    llm: Any = None,
    tools: Sequence[Any] | None = None,
    tool_executor: Callable[..., Any] | None = None,
    config: AgentRuntimeConfig | None = None,
    runtime_log_store: Any = None,
    enable_logging: bool = True,
    checkpoint_config: CheckpointConfig | None = None,
    graph_id: str | None = None,
    accounts_prompt: str = "",
    accounts_data: list[dict[str, Any]] | None = None,
    tool_provider_map: dict[str, str] | None = None,
) -> AgentRuntime:
    """hive's factory: the runtime with `entry_points` registered, not yet started
    (`enable_logging` is accepted: every run is in the log)."""
    runtime = AgentRuntime(
        graph, goal, storage_path, llm=llm, tools=tools, tool_executor=tool_executor,
        config=config, runtime_log_store=runtime_log_store,
        checkpoint_config=checkpoint_config, graph_id=graph_id,
        accounts_prompt=accounts_prompt, accounts_data=accounts_data,
        tool_provider_map=tool_provider_map,
    )  # fmt: skip
    for spec in entry_points:
        runtime.register_entry_point(spec)
    return runtime


__all__ = [
    "AgentRuntime",
    "AgentRuntimeConfig",
    "CheckpointConfig",
    "EntryPointSpec",
    "ExecutionResult",
    "ExecutionStream",
    "create_agent_runtime",
]
