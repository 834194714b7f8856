"""What a run starts from: the input a trigger brings, mapped into the graph's state.

hive hands every entry point a free-form dict (`{"query": "help"}`, `{"event": {...}}`) and
lets its nodes read whatever keys they like. Here the state is typed, so the input is mapped
before it is recorded, one way for every cause:

- an entry point with `input_schema=Model` validates the input against `Model` (refused with
  `InvalidTriggerInputError`, nothing written, when it does not fit); `Model.to_state()`,
  when the model defines it, gives the run's input; otherwise the fields named like the
  state's fields are set on it, and the rest reach the run as a user message holding them
  as JSON (so a model node reads the query);
- an event or timer run, which nobody typed, receives hive's `{"event": {...}}` (shaped by
  `input_from` when the entry point has one): into a state field `event` when the state has
  one, else as a user message holding it as JSON;
- any other input goes as it is, and a field the state lacks is refused before it is
  recorded (`check_input_fields`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from pydantic import BaseModel, ValidationError

from agentlog.actors.runtime.spec import InvalidTriggerInputError, RegistrationError, RuntimeConfig
from agentlog.events.errors import InvalidArgumentError, ThreadNotFoundError
from agentlog.projections import Message
from agentlog.projections.edge import to_builtins
from agentlog.projections.errors import InvalidStateUpdateError
from agentlog.projections.messages import is_message_dict

if TYPE_CHECKING:
    from agentlog.actors.runtime.runtime import AgentRuntime
    from agentlog.actors.runtime.spec import EntryPoint
    from agentlog.events import EventRecord
    from agentlog.projections.state import AgentState

PAYLOAD_CHARS = 2_000
"""How much of a runtime-made input a user message quotes."""


def event_payload(record: EventRecord, graph_id: str | None = None) -> dict[str, Any]:
    """hive's `event.to_dict()` for a committed record: its kind, where it stands (with the
    graph its thread runs), who wrote it and its data."""
    return {
        "type": record.kind,
        "graph_id": graph_id,
        "thread_id": record.thread_id,
        "seq": record.seq,
        "position": record.position,
        "run_id": record.run_id,
        "actor": record.actor,
        "data": msgspec.to_builtins(record.event),
    }


def timer_payload(entry: EntryPoint, slot: float, missed: int) -> dict[str, Any]:
    """hive's timer event (`{"source": "timer", "reason": "scheduled"}`), with the slot it
    fires for and how many missed slots it stands for."""
    return {
        "source": "timer",
        "reason": "scheduled",
        "entry_point": entry.id,
        "slot": datetime.fromtimestamp(slot, UTC).isoformat(),
        "missed": missed,
    }


def _as_message(values: Mapping[str, Any]) -> dict[str, Any]:
    text = json.dumps(to_builtins(dict(values)), default=str, sort_keys=True)[:PAYLOAD_CHARS]
    return to_builtins(Message.text_message(text, role="user"))  # type: ignore[no-any-return]


def _fields(state_cls: type[AgentState]) -> set[str]:
    return set(state_cls.model_fields) - {"execution_meta"}


def schema_input(
    entry: EntryPoint, schema: type[BaseModel], input: Any, state_cls: type[AgentState]
) -> Any:
    """The run's input from `input` validated by the entry point's `input_schema`."""
    try:
        if isinstance(input, schema):
            model = input
        elif isinstance(input, BaseModel):
            model = schema.model_validate(input.model_dump())
        else:
            model = schema.model_validate(input)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidTriggerInputError(
            f"entry point {entry.id!r} takes input shaped by {schema.__name__}: {problems}; "
            "nothing was recorded"
        ) from None
    to_state = getattr(model, "to_state", None)
    if callable(to_state):
        return to_state()
    values = model.model_dump(mode="json")
    known = _fields(state_cls)
    mapped = {k: v for k, v in values.items() if k in known}
    rest = {k: v for k, v in values.items() if k not in known}
    if rest:
        mapped["messages"] = [*mapped.get("messages", []), _as_message(rest)]
    return mapped


def shaped(entry: EntryPoint, input: Any, state_cls: type[AgentState]) -> Any:
    """A trigger's input mapped into the state as the entry point declares (see above)."""
    if entry.input_schema is not None:
        return schema_input(entry, entry.input_schema, input, state_cls)
    return input


def made_input(entry: EntryPoint, value: Any, state_cls: type[AgentState]) -> Any:
    """The input of a run nobody typed (an event's, a timer's): `value` is hive's
    `{"event": ...}` or what the entry point's `input_from` made of it."""
    if entry.input_schema is not None:
        return schema_input(entry, entry.input_schema, value, state_cls)
    if entry.input_from is not None or not isinstance(value, Mapping):
        return value  # the entry point's own shape, checked like any input
    known = _fields(state_cls)
    if set(value) <= known:
        return dict(value)
    return {"messages": [_as_message(value)]}


def recordable_input(
    entry: EntryPoint, input: Any, resume: bool, state_cls: type[AgentState] | None
) -> Any:
    """A trigger's input, mapped (`shaped`), as the builtins the trigger records; refused
    (typed, nothing written) when it is no input a run of the graph takes (a field the state
    lacks, a value it refuses) or cannot be recorded."""
    from agentlog.actors.engine.steps import check_input_fields, checked_input

    if not resume and input is not None and state_cls is not None:
        input = shaped(entry, input, state_cls)
    if not resume:
        checked_input(input)
    try:
        recorded = to_builtins(input)
    except (TypeError, ValueError) as exc:
        raise InvalidTriggerInputError(
            f"a trigger's input is recorded in the log: {type(input).__name__} cannot be "
            f"({exc}); send text, messages or a dict of plain values"
        ) from exc
    if not resume and input is not None and state_cls is not None:
        try:
            check_input_fields(state_cls, recorded)
        except InvalidStateUpdateError as exc:
            if entry.input_schema is not None or type(exc) is not InvalidStateUpdateError:
                raise
            raise InvalidStateUpdateError(
                f"{exc}; or map free-form input into the state with "
                f"EntryPoint(id={entry.id!r}, ..., input_schema=Model)"
            ) from None
    return recorded


async def with_session_keys(
    runtime: AgentRuntime, entry: EntryPoint, thread_id: str, run_input: Any
) -> Any:
    """The run's input with `entry.input_keys` copied from the user's active thread (the
    only thing read from it; nothing is written there). An active thread whose first run
    is still queued has nothing to copy yet: the run goes on without (never retried)."""
    active = runtime.active_thread
    graph_id = runtime.ledger.graph_of.get(active) if active else None
    if active is None or active == thread_id or graph_id not in runtime.graphs:
        return run_input
    try:
        source = await runtime.graphs[graph_id].app.aget_state({"thread_id": active})
    except ThreadNotFoundError:
        return run_input
    values = {
        key: to_builtins(getattr(source, key))
        for key in entry.input_keys
        if key in type(source).model_fields
    }
    return with_fields(run_input, values, over=True) if values else run_input


def with_fields(input: Any, values: Mapping[str, Any], *, over: bool) -> Any:
    """`input` with state fields `values` added: beside a dict of fields (`over`: the values
    win), or around messages (`{"messages": [...], **values}`)."""
    if isinstance(input, Mapping) and not is_message_dict(input):
        return {**input, **values} if over else {**values, **input}
    if input is None:
        return dict(values)
    return {"messages": input if isinstance(input, list) else [input], **values}


def with_session_state(
    session_state: Mapping[str, Any] | None, input: Any, thread_id: str | None
) -> tuple[Any, str | None]:
    """hive's `session_state` on a trigger: `resume_session_id` names the thread the run
    joins, `memory` holds state fields merged into its input (a field the state lacks is
    refused like any input's, before anything is recorded)."""
    if session_state is None:
        return input, thread_id
    if not isinstance(session_state, Mapping):
        raise InvalidTriggerInputError(
            f"session_state is a dict (resume_session_id, memory), got {session_state!r:.60}"
        )
    resume = session_state.get("resume_session_id")
    if resume is not None and thread_id is not None and resume != thread_id:
        raise InvalidTriggerInputError(
            f"session_state names thread {resume!r} and thread_id {thread_id!r}: name one"
        )
    memory = session_state.get("memory") or {}
    if not isinstance(memory, Mapping):
        raise InvalidTriggerInputError(f"session_state['memory'] is a dict, got {memory!r:.60}")
    if memory:
        input = with_fields(input, memory, over=False)  # the caller's input wins
    return input, resume if resume is not None else thread_id


async def session_thread(runtime: AgentRuntime, entry: EntryPoint) -> str | None:
    """The thread a run nobody typed runs on when its entry point says `session="primary"`
    (hive's primary session): None (a thread of its own) unless the user's active thread
    runs the entry point's graph. An idle session (its last run ended, nothing going on)
    is joined: the run goes on in the user's thread. A session whose run is paused for the
    user, or going on, is forked as the user last left it (its head when paused; else where
    its last ended run left it), so the run sees all the user typed and never ends the
    user's pause; a session with no ended run yet gives a thread of its own. An isolated
    entry point's run never writes the user's thread: it always runs on such a fork."""
    active = runtime.active_thread
    if entry.session != "primary" or active is None:
        return None
    graph_id = runtime.ledger.graph_of.get(active)
    if graph_id != entry.graph_id or graph_id not in runtime.graphs:
        return None
    latest = runtime.ledger.latest_on(active)
    busy = runtime._busy(active)
    idle = not busy and latest is not None and latest.done and latest.outcome != "interrupted"
    if idle and entry.isolation != "isolated":
        return active
    at_seq: int | None = None
    if busy:
        ended = [
            runtime.ledger.triggers[t]
            for t in runtime.ledger.by_thread.get(active, [])
            if runtime.ledger.triggers[t].done and runtime.ledger.triggers[t].end_seq
        ]
        if not ended:
            return None
        at_seq = ended[-1].end_seq
    app = runtime.graphs[graph_id].app
    return await app.afork({"thread_id": active}, at_seq=at_seq)


__all__ = [
    "event_payload",
    "made_input",
    "recordable_input",
    "schema_input",
    "shaped",
    "timer_payload",
]


def check_request(
    config: RuntimeConfig, thread_id: Any, priority: Any, correlation_id: Any
) -> None:
    """A trigger's thread id, priority and correlation id, refused before anything is written."""
    if correlation_id is not None and (not isinstance(correlation_id, str) or not correlation_id):
        raise RegistrationError(
            f"correlation_id must be a non-empty string, got {correlation_id!r}"
        )
    if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
        raise RegistrationError(f"thread_id must be a non-empty string, got {thread_id!r}")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise RegistrationError(f"priority must be an int (higher runs first), got {priority!r}")
    if thread_id is not None and config.is_internal(thread_id):
        raise RegistrationError(
            f"{thread_id!r} names one of the runtime's own threads (ids beginning "
            f"{config.runtime_thread!r} or '__shared__/' are reserved): pick another id"
        )


async def check_trigger_subject(store: Any, subject: Any, thread_id: str | None) -> None:
    """A trigger's data subject: a valid id, not erased, and the one its thread (if it has
    one already) is tagged with; refused before anything is written."""
    from agentlog.events.keystore import ThreadTaggedError, keyring, subject_of_thread
    from agentlog.events.sealing import Erasure, SubjectErasedError, check_subject

    try:
        check_subject(subject)
    except InvalidArgumentError as exc:
        raise RegistrationError(str(exc)) from None
    found = (await keyring(store).keys.get({subject})).get(subject)
    if isinstance(found, Erasure):
        raise SubjectErasedError(found)
    held = None if thread_id is None else await subject_of_thread(store, thread_id)
    if held is not None and held != subject:
        raise ThreadTaggedError.of(str(thread_id), held, subject)
