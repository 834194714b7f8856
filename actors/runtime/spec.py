"""What a runtime is told: its limits, its entry points and how failed runs are retried."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel

from agentlog.actors.engine.fingerprint import check_policy
from agentlog.actors.engine.retention import Retention
from agentlog.actors.engine.retry import RetryPolicy as NodeRetryPolicy
from agentlog.actors.engine.threads import RUNTIME_THREAD, internal_thread
from agentlog.actors.engine.threads import SHARED_THREAD_PREFIX as SHARED_THREAD_PREFIX
from agentlog.events.errors import AgentlogError
from agentlog.events.kinds import KINDS, RUNTIME_KINDS, RunCompleted
from agentlog.projections import IllegalTransitionError

Trigger = Literal["api", "event", "timer", "webhook"]
MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]
"""What new input for a thread whose run is still going does (LangGraph's names): `reject`
refuses it, `enqueue` waits its turn, `interrupt` stops the running run (as a stop: the node
running finishes and commits) and then continues the thread with the new input, `rollback`
cancels the running run, sets the thread back to the state before it, then runs the input."""
MULTITASK_STRATEGIES: tuple[str, ...] = ("reject", "enqueue", "interrupt", "rollback")
Isolation = Literal["isolated", "shared", "synchronized"]
"""What an entry point's runs may do with the runtime's shared keys (see `shared`)."""
ISOLATIONS: tuple[str, ...] = ("isolated", "shared", "synchronized")
Session = Literal["own", "primary"]
TRIGGERS: tuple[str, ...] = ("api", "event", "timer", "webhook")
WEBHOOK_SCHEMES: tuple[str, ...] = ("standard", "github")
"""Built-in webhook signature schemes: Standard Webhooks, and GitHub's X-Hub-Signature-256."""


class AgentRuntimeError(AgentlogError):
    """Base of the runtime's own errors."""


class RegistrationError(AgentRuntimeError, ValueError):
    """A graph or an entry point was refused; nothing was registered."""


class InvalidTriggerInputError(AgentRuntimeError, ValueError):
    """A trigger's input is no input a run takes, or cannot be recorded; nothing written."""


class UnknownEntryPointError(AgentRuntimeError, LookupError):
    """No entry point has that id."""


class RunNotWaitingError(AgentRuntimeError):
    """Input was injected into a run that is not paused waiting for it."""


class RuntimeNotStartedError(AgentRuntimeError):
    """The runtime must be started (`async with runtime` or `await runtime.start()`)."""


class RunCancelledError(AgentRuntimeError):
    """The run `wait` waited for was cancelled: who and why are in the message."""


class ThreadBusyRunError(AgentRuntimeError):
    """New input for a thread whose run is still going, refused (`multitask_strategy`
    "reject"): nothing was written."""


class IdempotencyKeyMismatchError(AgentRuntimeError):
    """An idempotency key its caller used before for another request (another thread, or
    other input): nothing is started or written; a new request takes a new key."""


class UnknownRunError(AgentRuntimeError, LookupError):
    """No run of this runtime is on that thread."""


class RuntimeRunFailedError(AgentRuntimeError):
    """A run failed for good (after its retries); `error_type` names its error's class.

    In the process that ran it, `wait` raises the run's own error instead; this one stands
    for it after a restart, when only the log's record of the error is left.
    """

    def __init__(self, message: str, *, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def retry_can_fix(error: BaseException | None) -> bool:
    """Whether another attempt may end otherwise: never for the caller's own mistake (input
    the state refuses, a thread id no append takes, a resume with nothing to resume), which
    fails the same way every time. An error only known by name (after a restart) may be."""
    if error is None:
        return True
    return not isinstance(error, ValueError | IllegalTransitionError)


@dataclass(frozen=True)
class RetryPolicy(NodeRetryPolicy):
    """A failed run is retried from the log (not from scratch) up to `max_attempts` in all,
    waiting `backoff_s` times 2**(attempt-1) between attempts; errors whose class is in
    `fatal` (by name or class) are never retried. The engine's `RetryPolicy` (a node's), whose
    fields and `delay` it shares, refusing a bad field with `RegistrationError`."""

    INVALID: ClassVar[type[Exception]] = RegistrationError


@dataclass(frozen=True)
class EntryPoint:
    """A way runs of a graph start: by an API call, by committed events, or by a timer.

    `kinds`, `from_graph`, `thread_id` and `node` filter the events an "event" entry point
    answers (never its own graph's, unless `include_own`); `input_from` turns the record
    into the run's input (by default a user message holding the record as JSON). A "timer"
    entry point has `interval_s` or `cron` (read in `timezone`, else the runtime's);
    `run_immediately` fires one slot at start; with `thread_id` its runs go on that thread.
    """

    id: str
    graph_id: str
    trigger: Trigger = "api"
    entry_node: str | None = None
    max_concurrent: int | None = None
    priority: int = 0
    retry: NodeRetryPolicy | None = None
    kinds: Sequence[str] | None = None
    from_graph: str | None = None
    thread_id: str | None = None
    node: str | None = None
    include_own: bool = False
    input_from: Callable[[Any], Any] | None = None
    """An event run's input from the record it answers (input_from(record)); a timer run's
    from hive's {"event": {"source": "timer", ...}} (input_from(fired))."""
    interval_s: float | None = None
    cron: str | None = None
    run_immediately: bool = False
    path: str | None = None
    methods: Sequence[str] = ("POST",)
    secrets: Sequence[str] = ()
    scheme: str | Callable[..., bool] = "standard"
    unsigned: bool = False
    tolerance_s: float = 300.0
    multitask_strategy: MultitaskStrategy = "enqueue"
    isolation: Isolation = "isolated"
    input_keys: Sequence[str] = ()
    """State fields an event or timer run copies from the user's active thread (hive's
    primary session) into its own input; it never writes that thread."""
    name: str = field(default="")
    webhook: str | None = None
    """An event entry point answering the deliveries of this webhook entry point (hive's
    `webhook_received` events filtered by the route's `source_id`): each delivery is an
    event every such entry point answers once, beside the webhook's own run."""
    session: Session = "own"
    """"primary": an event or timer run shares the user's active thread (hive's primary
    session: memory, logs and rules the user typed are its own): it runs in that thread
    while the session is idle and its isolation lets it write there ("shared",
    "synchronized"), else on a fork of it; "own": a thread of its own (with `input_keys`)."""
    timezone: str | None = None
    """A timer's IANA time zone its cron is read in (None: `RuntimeConfig.timezone`)."""
    result_webhook: str | None = None
    """Where each run's result is POSTed when it ends (recorded on its acceptance; the HTTP
    server sends it, as for a run created with `webhook=`)."""
    input_schema: type[BaseModel] | None = None
    """A pydantic model a trigger's input must fit (refused before anything is recorded
    otherwise); its fields named like the state's are set, the rest reach the run as a user
    message holding them as JSON, unless the model's `to_state()` maps them itself."""

    def check(self) -> None:
        """Refuse what is wrong with this entry point on its own (not against the graphs)."""
        if not isinstance(self.id, str) or not self.id.strip():
            raise RegistrationError(f"an entry point needs a non-empty id, got {self.id!r}")
        if self.trigger not in TRIGGERS:
            raise RegistrationError(
                f"entry point {self.id!r}: trigger must be one of {', '.join(TRIGGERS)}, "
                f"got {self.trigger!r}"
            )
        if self.max_concurrent is not None and (
            isinstance(self.max_concurrent, bool)
            or not isinstance(self.max_concurrent, int)
            or self.max_concurrent < 1
        ):
            raise RegistrationError(
                f"entry point {self.id!r}: max_concurrent must be an int >= 1 or None"
            )
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise RegistrationError(f"entry point {self.id!r}: priority must be an int")
        if self.retry is not None and not isinstance(self.retry, NodeRetryPolicy):
            raise RegistrationError(
                f"entry point {self.id!r}: retry is a RetryPolicy(max_attempts, backoff_s) or "
                f"None, got {self.retry!r}"
            )
        if self.trigger == "event":
            self._check_webhook_source()
            if isinstance(self.kinds, str | bytes):
                raise RegistrationError(
                    f"entry point {self.id!r}: kinds is a list of event kinds, got "
                    f"{self.kinds!r}: write kinds=[{self.kinds!r}]"
                )
            if self.kinds is not None and not list(self.kinds):
                raise RegistrationError(
                    f"entry point {self.id!r}: kinds is empty, so no event would match: name "
                    "the kinds, or leave kinds out to answer every kind"
                )
            for kind in self.kinds or ():
                if kind not in KINDS:
                    raise RegistrationError(
                        f"entry point {self.id!r}: {kind!r} is not an event kind (known: "
                        f"{', '.join(sorted(KINDS))})"
                    )
                if kind in RUNTIME_KINDS:
                    raise RegistrationError(
                        f"entry point {self.id!r}: {kind!r} is written only to the runtime's "
                        "own thread, which event entry points never answer, so no run would "
                        f"start: answer the kinds runs write (say {RunCompleted.KIND!r})"
                    )
        elif (
            self.kinds
            or self.from_graph
            or self.node
            or (self.thread_id is not None and self.trigger != "timer")
            or self.include_own
            or self.webhook is not None
            or (self.input_from is not None and self.trigger != "timer")
        ):
            raise RegistrationError(
                f"entry point {self.id!r}: kinds, from_graph, thread_id, node, include_own, "
                "webhook and input_from say which events start runs and with what input: "
                "they belong to trigger='event' (input_from to a timer too; an api run names "
                "its thread in trigger(..., thread_id=...))"
            )
        if self.input_schema is not None and not (
            isinstance(self.input_schema, type) and issubclass(self.input_schema, BaseModel)
        ):
            raise RegistrationError(
                f"entry point {self.id!r}: input_schema is a pydantic model class (class "
                f"Query(BaseModel): query: str), got {self.input_schema!r}"
            )
        if self.multitask_strategy not in MULTITASK_STRATEGIES:
            raise RegistrationError(
                f"entry point {self.id!r}: multitask_strategy is one of "
                f"{', '.join(MULTITASK_STRATEGIES)}, got {self.multitask_strategy!r}"
            )
        if self.isolation not in ISOLATIONS:
            raise RegistrationError(
                f"entry point {self.id!r}: isolation is one of {', '.join(ISOLATIONS)}, got "
                f"{self.isolation!r}"
            )
        if isinstance(self.input_keys, str) or not all(
            isinstance(k, str) and k for k in self.input_keys
        ):
            raise RegistrationError(
                f"entry point {self.id!r}: input_keys is a list of state field names, got "
                f"{self.input_keys!r}"
            )
        self._check_session()
        if self.input_keys and self.trigger not in ("event", "timer"):
            raise RegistrationError(
                f"entry point {self.id!r}: input_keys copy the active thread's state into "
                "runs nobody typed (event and timer entry points); an api run brings its input"
            )
        self._check_webhook()
        if self.trigger == "timer":
            if (self.interval_s is None) == (self.cron is None):
                raise RegistrationError(
                    f"entry point {self.id!r}: a timer needs exactly one of interval_s or cron"
                )
            if self.interval_s is not None and not (
                isinstance(self.interval_s, int | float)
                and not isinstance(self.interval_s, bool)
                and math.isfinite(self.interval_s)
                and self.interval_s > 0
            ):
                raise RegistrationError(
                    f"entry point {self.id!r}: interval_s must be a number of seconds > 0, "
                    f"got {self.interval_s!r}"
                )
            if self.timezone is not None and not is_zone(self.timezone):
                raise RegistrationError(
                    f"entry point {self.id!r}: timezone {self.timezone!r} is not an IANA "
                    "time zone (say 'UTC' or 'Europe/Paris')"
                )
        elif self.interval_s is not None or self.cron is not None or self.run_immediately:
            raise RegistrationError(
                f"entry point {self.id!r}: interval_s, cron and run_immediately belong to "
                "trigger='timer'"
            )

    def _check_webhook_source(self) -> None:
        if self.webhook is None:
            return
        if not isinstance(self.webhook, str) or not self.webhook:
            raise RegistrationError(
                f"entry point {self.id!r}: webhook names a webhook entry point's id, got "
                f"{self.webhook!r}"
            )
        if self.kinds or self.from_graph or self.thread_id is not None or self.node:
            raise RegistrationError(
                f"entry point {self.id!r}: webhook={self.webhook!r} answers that route's "
                "deliveries; kinds, from_graph, thread_id and node filter runs' records: "
                "register one entry point for each"
            )

    def _check_session(self) -> None:
        if self.session not in ("own", "primary"):
            raise RegistrationError(
                f"entry point {self.id!r}: session is 'own' or 'primary', got {self.session!r}"
            )
        if self.session == "own":
            return
        if self.trigger not in ("event", "timer"):
            raise RegistrationError(
                f"entry point {self.id!r}: session='primary' puts runs nobody typed (event "
                "and timer entry points) in the user's thread; an api run names its thread "
                "in trigger(..., thread_id=...)"
            )
        if self.input_keys:
            raise RegistrationError(
                f"entry point {self.id!r}: input_keys copy fields into a thread of its own; "
                "with session='primary' the run reads the user's thread itself"
            )

    def _check_webhook(self) -> None:
        if self.trigger != "webhook":
            if self.path is not None or self.secrets or self.unsigned:
                raise RegistrationError(
                    f"entry point {self.id!r}: path, secrets and unsigned belong to "
                    "trigger='webhook'"
                )
            return
        if not isinstance(self.path, str) or not self.path.startswith("/") or "?" in self.path:
            raise RegistrationError(
                f"entry point {self.id!r}: a webhook needs a path such as '/hooks/zendesk', "
                f"got {self.path!r}"
            )
        methods = [m.upper() for m in self.methods if isinstance(m, str)]
        if not methods or len(methods) != len(list(self.methods)) or not set(methods) <= {
            "POST", "PUT", "PATCH",
        }:  # fmt: skip
            raise RegistrationError(
                f"entry point {self.id!r}: webhook methods are POST, PUT or PATCH, got "
                f"{list(self.methods)!r}"
            )
        if isinstance(self.secrets, str) or not all(isinstance(s, str) and s for s in self.secrets):
            raise RegistrationError(
                f"entry point {self.id!r}: secrets is a list of non-empty strings (two at "
                "once while rotating)"
            )
        if not self.secrets and not self.unsigned:
            raise RegistrationError(
                f"entry point {self.id!r}: a webhook without secrets must say unsigned=True "
                "(and is then served on a loopback address only)"
            )
        if self.secrets and self.unsigned:
            raise RegistrationError(f"entry point {self.id!r}: unsigned=True with secrets")
        if not callable(self.scheme) and self.scheme not in WEBHOOK_SCHEMES:
            raise RegistrationError(
                f"entry point {self.id!r}: scheme is 'standard', 'github' or a function "
                f"verify(headers, body, secrets), got {self.scheme!r}"
            )
        if not (isinstance(self.tolerance_s, int | float) and 0 < self.tolerance_s <= 86_400):
            raise RegistrationError(
                f"entry point {self.id!r}: tolerance_s is seconds in (0, 86400], got "
                f"{self.tolerance_s!r}"
            )


@dataclass(frozen=True)
class RuntimeConfig:
    """A runtime's limits: runs executing at once, and its log's own thread."""

    max_concurrent_runs: int = 100
    runtime_thread: str = RUNTIME_THREAD
    """The thread the runtime records its triggers, dispatches and outcomes in."""
    global_keys: Sequence[str] = ()
    """Shared keys every graph sees as one (the others are namespaced by graph)."""
    worker_id: str | None = None
    """Set, the runtime is one of many workers sharing the store (processes, hosts): each
    triggered run is leased by exactly one worker, and a dead worker's runs are taken over
    once its lease expires (see `workers`). None: the only runtime on the store."""
    lease_s: float = 10.0
    """A worker's lease on a run: how long another host waits after its last heartbeat
    (on the same host, a dead process is seen at once)."""
    poll_s: float = 0.1
    """How often a worker reads what the other workers recorded (when no commit wakes it)."""
    timezone: str | None = None
    """The zone cron expressions are read in ("Europe/Paris"); None: the machine's local
    time (its UTC offset when the runtime is configured), as hive's."""
    keep_results: int = 10_000
    """Ended runs kept in memory for `wait`, `cancel` and the stats, without their input
    (hive's default); an older one is read from the log (`aget_state`), its key still
    deduplicates and the stats still count it."""
    keep_results_ttl_s: float | None = None
    """And for how long at most, in seconds of the log's time (hive's
    `execution_result_ttl_seconds`); None: no limit but `keep_results`."""
    on_code_change: Literal["warn", "refuse", "allow"] = "warn"
    """What resuming a run begun under other code does (`agentlog.actors.engine.fingerprint`):
    warn, refuse (the attempt fails, nothing written) or allow; its `resumed` records it."""
    retention: Retention | None = None
    """How long every graph's threads are kept, applied by the runtime's timer (a graph's own
    by `set_retention` stands instead); None: kept until pruned (`agentlog prune`)."""

    def __post_init__(self) -> None:
        if self.retention is not None and not isinstance(self.retention, Retention):
            raise RegistrationError(
                f"retention is a Retention(keep_runs=N | keep_days=N | idle_days=N) or None, "
                f"got {self.retention!r}"
            )
        try:
            check_policy(self.on_code_change)
        except AgentlogError as exc:
            raise RegistrationError(str(exc)) from None
        ttl = self.keep_results_ttl_s
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0
        ):
            raise RegistrationError(f"keep_results_ttl_s is seconds > 0 or None, got {ttl!r}")
        keys = self.global_keys
        if isinstance(keys, str | bytes) or not all(
            isinstance(k, str) and k and "/" not in k for k in keys
        ):
            raise RegistrationError(
                "global_keys is a list of shared key names (non-empty, without '/'), got "
                f"{keys!r}" + (f": write [{keys!r}]" if isinstance(keys, str) else "")
            )
        object.__setattr__(self, "global_keys", tuple(keys))
        if self.timezone is not None and not is_zone(self.timezone):
            raise RegistrationError(
                f"timezone is an IANA zone name such as 'Europe/Paris' or 'UTC' (None: "
                f"local time), got {self.timezone!r}"
            )
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str) or not self.worker_id.strip()
        ):
            raise RegistrationError(f"worker_id is a non-empty string, got {self.worker_id!r}")
        for name in ("lease_s", "poll_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise RegistrationError(f"{name} is a number of seconds > 0, got {value!r}")
        if (
            isinstance(self.keep_results, bool)
            or not isinstance(self.keep_results, int)
            or self.keep_results < 1
        ):
            raise RegistrationError(
                f"keep_results must be an int >= 1 (ended runs kept for wait), got "
                f"{self.keep_results!r}"
            )
        if (
            isinstance(self.max_concurrent_runs, bool)
            or not isinstance(self.max_concurrent_runs, int)
            or self.max_concurrent_runs < 1
        ):
            raise RegistrationError(
                f"max_concurrent_runs must be an int >= 1, got {self.max_concurrent_runs!r}"
            )

    @property
    def zone(self) -> tzinfo:
        """The time zone cron slots are computed in."""
        if self.timezone is None:
            return datetime.now().astimezone().tzinfo or UTC
        return ZoneInfo(self.timezone)

    def is_internal(self, thread_id: str) -> bool:
        """Whether `thread_id` names a thread of the runtime's own (its ledger, a worker's
        lease or id, a synchronized shared key): no run, fork or client may create one."""
        return internal_thread(thread_id, self.runtime_thread)


def is_zone(name: object) -> bool:
    """Whether `name` is an IANA time zone this machine knows."""
    try:
        ZoneInfo(name)  # type: ignore[arg-type]
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return False
    return True


def check_timeout(timeout: float | None) -> None:
    """A `timeout=` is seconds, a number >= 0, or None (no limit)."""
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0
    ):
        raise RegistrationError(
            f"timeout is a number of seconds >= 0 or None (no limit); got {timeout!r}"
        )


def check_position(at_position: int | None) -> None:
    """An `at_position=` is a log position: an int >= 0 (0: before anything), or None."""
    if at_position is not None and (type(at_position) is not int or at_position < 0):
        raise RegistrationError(
            f"at_position is a log position, an int >= 0 (a record's .position): {at_position!r}"
        )
