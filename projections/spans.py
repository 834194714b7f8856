"""A thread's records as trace spans: the telemetry of a run, derived from its log.

`SpanFold` reads a thread's records in seq order and hands back each span the moment the
record that closes it arrives: an `invoke_agent` span per invocation of a run (from the
record that starts or resumes it to the one that ends or pauses it), a span per node's
step, an `execute_tool` span per tool call and a `chat` span per model call, named and
attributed after the OpenTelemetry GenAI semantic conventions. Interrupts, resumes, stops,
cancels, forks and human edits are span events; a failure is the span's error status.

Everything is a function of the records: trace ids of (thread, run), span ids of (thread,
seq of the record that opened the span), times of the records' `at`, and each span names
the record it came from (`agentlog.seq`, `agentlog.hash`). So the spans taken live from a
follower of the log and those rebuilt a month later from an archived database or an
export are the same, byte for byte. Nothing here imports OpenTelemetry: `agentlog.otel`
hands these values to an SDK's tracer provider.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from agentlog.events.kinds import (
    BranchEntered,
    Forked,
    InterruptRaised,
    MessageAppended,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    ModelCalled,
    NodeEntered,
    Resumed,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunSuperseded,
    StateUpdated,
    StepAdvanced,
    Stopped,
    StopRequested,
    SubgraphRan,
    ToolCallFinished,
    ToolCallStarted,
)
from agentlog.events.record import EventRecord
from agentlog.projections.usage import counted, tokens_of

Attribute: TypeAlias = str | bool | int | float | tuple[str, ...]
Attributes: TypeAlias = dict[str, Attribute]
Status: TypeAlias = Literal["unset", "ok", "error"]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class SpanEvent:
    """Something that happened within a span, at `at_ns` (nanoseconds since the epoch)."""

    name: str
    at_ns: int
    attributes: Attributes = field(default_factory=dict)


@dataclass(frozen=True)
class Span:
    """A finished span: its ids (ints, as OpenTelemetry keeps them), its parent (None: a
    root; `remote_parent`: the parent is the caller's, from a W3C `traceparent`), its times
    in nanoseconds since the epoch, attributes, events and status."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    attributes: Attributes
    events: tuple[SpanEvent, ...] = ()
    status: Status = "unset"
    status_description: str | None = None
    kind: Literal["internal", "client"] = "internal"
    remote_parent: bool = False


def trace_id_of(thread_id: str, run_id: str | None, seq: int) -> int:
    """The trace id of a run: 128 bits of SHA-256 over (thread, run); a record outside any
    run is a trace of its own, named by its seq."""
    run = run_id if run_id is not None else f"#{seq}"
    return _bits(f"agentlog/trace\x00{thread_id}\x00{run}", 16)


def span_id_of(thread_id: str, seq: int) -> int:
    """The span id of the span opened by record `seq` of the thread: 64 bits of SHA-256."""
    return _bits(f"agentlog/span\x00{thread_id}\x00{seq}", 8)


def _bits(text: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big")
    return value or 1  # zero is OpenTelemetry's "invalid id"


def parse_traceparent(value: object) -> tuple[int, int, bool] | None:
    """(trace id, parent span id, sampled) of a W3C `traceparent` header (version 00), or
    None when `value` is not one (an all-zero id is invalid too)."""
    if not isinstance(value, str):
        return None
    found = _TRACEPARENT.match(value.strip().lower())
    if found is None:
        return None
    trace_id, span_id = int(found.group(1), 16), int(found.group(2), 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, bool(int(found.group(3), 16) & 1)


def _ns(at: float) -> int:
    return round(at * 1e9)


@dataclass
class _Open:
    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    attributes: Attributes
    events: list[SpanEvent] = field(default_factory=list)
    remote_parent: bool = False
    status: Status = "unset"
    description: str | None = None

    def close(self, end_ns: int, kind: Literal["internal", "client"] = "internal") -> Span:
        return Span(
            name=self.name,
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_id=self.parent_id,
            start_ns=self.start_ns,
            end_ns=max(end_ns, self.start_ns),
            attributes=dict(self.attributes),
            events=tuple(self.events),
            status=self.status,
            status_description=self.description,
            kind=kind,
            remote_parent=self.remote_parent,
        )

    def fail(self, error_type: str, message: str) -> None:
        self.status = "error"
        self.description = f"{error_type}: {message}"
        self.attributes["error.type"] = error_type


def _origin(record: EventRecord) -> Attributes:
    return {"agentlog.seq": record.seq, "agentlog.hash": record.hash}


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


_EDITS = (MessageAppended, MessageReplaced, MessagesReplaced, MessagesRemoved, StateUpdated)


class SpanFold:
    """The spans of one thread, folded from its records in seq order.

    `feed(record)` returns the spans that record closes (none, for most records); a span
    still open when the records run out (a run under way) is not returned until the record
    that ends it comes. `capture_content` adds tool arguments and results and resume values
    (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`): off by default, as the
    conventions ask, since they may hold personal data.
    """

    def __init__(self, thread_id: str, *, capture_content: bool = False) -> None:
        self.thread_id = thread_id
        self.capture_content = capture_content
        self._run: _Open | None = None
        self._nodes: dict[str, _Open] = {}
        self._tools: dict[str, _Open] = {}
        self._pending: list[SpanEvent] = []
        self._graphs: dict[str | None, str] = {}
        """The graph each run started on (by run id): a resumed call runs the same graph."""
        self.last_seq = 0

    def feed(self, record: EventRecord) -> list[Span]:
        """The spans `record` closes, in the order they end (children before parents)."""
        self.last_seq = record.seq
        event = record.event
        if isinstance(event, RunStarted | Resumed):
            return self._open_run(record, event)
        if isinstance(event, Forked):
            self._note(
                record,
                "forked",
                {
                    "agentlog.fork.source_thread": event.source_thread,
                    "agentlog.fork.source_seq": event.source_seq,
                },
            )
            return []
        if isinstance(event, _EDITS) and self._is_edit(record, event):
            reason = getattr(event, "reason", None)
            attributes: Attributes = {"agentlog.edit.kind": record.kind}
            if record.actor is not None:
                attributes["agentlog.edit.by"] = record.actor
            if reason:
                attributes["agentlog.edit.reason"] = reason
            self._note(record, "human_edit", attributes)
            return []
        if isinstance(event, StopRequested):
            self._note(record, "stop_requested", _given(by=event.by, reason=event.reason))
            return []
        if isinstance(event, RunSuperseded):
            self._note(record, "run_superseded", _given(by=event.by, run_id=event.run_id))
            return []
        done: list[Span] = []
        if isinstance(event, NodeEntered | BranchEntered):
            done += self._open_node(record, event)
        elif isinstance(event, ToolCallStarted):
            self._open_tool(record, event)
        elif isinstance(event, ToolCallFinished):
            done += self._close_tool(record, event)
        elif isinstance(event, ModelCalled):
            done.append(self._chat(record, event))
        elif isinstance(event, SubgraphRan):
            self._on_node(
                event.node,
                record,
                "subgraph_ran",
                {
                    "agentlog.subgraph.namespace": event.namespace,
                    "agentlog.subgraph.thread_id": event.thread_id,
                    "agentlog.subgraph.seq": event.seq,
                    "agentlog.subgraph.status": event.status,
                },
            )
        elif isinstance(event, StepAdvanced):
            done += self._close_nodes(record, step=event.step, duration_ms=event.duration_ms)
        elif isinstance(event, InterruptRaised | Stopped | RunCompleted | RunFailed | RunCancelled):
            done += self._end_run(record, event)
        return done

    # ---- runs ----------------------------------------------------------------------------

    def _open_run(self, record: EventRecord, event: RunStarted | Resumed) -> list[Span]:
        done = self._abandon(record) if self._run is not None else []
        trace_id = trace_id_of(self.thread_id, record.run_id, record.seq)
        parent = parse_traceparent(event.traceparent)
        if isinstance(event, RunStarted):
            self._graphs = {record.run_id: event.graph} if event.graph else {}
        graph = self._graphs.get(record.run_id)
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": self.thread_id,
            "agentlog.thread_id": self.thread_id,
            **_origin(record),
        }
        if record.run_id is not None:
            attributes["agentlog.run_id"] = record.run_id
        if graph:
            attributes["gen_ai.agent.name"] = graph
        if isinstance(event, RunStarted):
            attributes["agentlog.entry_node"] = event.entry_node
        if event.trigger_id is not None:
            attributes["agentlog.trigger_id"] = event.trigger_id
        run = _Open(
            name=f"invoke_agent {graph}" if graph else "invoke_agent",
            trace_id=parent[0] if parent else trace_id,
            span_id=span_id_of(self.thread_id, record.seq),
            parent_id=parent[1] if parent else None,
            start_ns=_ns(record.at),
            attributes=attributes,
            remote_parent=parent is not None,
        )
        run.events, self._pending = self._pending, []
        if isinstance(event, Resumed):
            attributes["agentlog.resumed"] = True
            said = _given(by=event.by, node=event.node)
            if self.capture_content:
                said["agentlog.resume.value"] = _json(event.value)
            run.events.append(SpanEvent("resumed", _ns(record.at), said))
        self._run = run
        return done

    def _ensure_run(self, record: EventRecord) -> _Open:
        """The run under way; a node's record with none open (a log that starts mid-run, or
        a run taken up after a crash) opens one at that record."""
        if self._run is None:
            self._run = _Open(
                name="invoke_agent",
                trace_id=trace_id_of(self.thread_id, record.run_id, record.seq),
                span_id=span_id_of(self.thread_id, record.seq),
                parent_id=None,
                start_ns=_ns(record.at),
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.conversation.id": self.thread_id,
                    "agentlog.thread_id": self.thread_id,
                    **_given(**{"agentlog.run_id": record.run_id}),
                    **_origin(record),
                },
            )
            self._run.events, self._pending = self._pending, []
        return self._run

    def _end_run(
        self,
        record: EventRecord,
        event: InterruptRaised | Stopped | RunCompleted | RunFailed | RunCancelled,
    ) -> list[Span]:
        run = self._ensure_run(record)
        at = _ns(record.at)
        if isinstance(event, InterruptRaised):
            outcome = "interrupted"
            run.events.append(
                SpanEvent(
                    "interrupt",
                    at,
                    {
                        "agentlog.node": event.node,
                        "agentlog.interrupt.reason": event.reason,
                        "agentlog.interrupt.when": event.when,
                        "agentlog.interrupt.by_node": event.by_node,
                    },
                )
            )
        elif isinstance(event, Stopped):
            outcome = "stopped"
            run.events.append(
                SpanEvent(
                    "stopped", at, _given(node=event.node, when=event.when, reason=event.reason)
                )
            )
        elif isinstance(event, RunCancelled):
            outcome = "cancelled"
            run.events.append(
                SpanEvent(
                    "cancelled", at, _given(by=event.by, node=event.node, reason=event.reason)
                )
            )
        elif isinstance(event, RunFailed):
            outcome = event.status
            run.fail(event.error_type, event.message)
            run.events.append(
                SpanEvent(
                    "exception",
                    at,
                    {"exception.type": event.error_type, "exception.message": event.message},
                )
            )
            node = self._nodes.get(event.node or "")
            if node is not None:
                node.fail(event.error_type, event.message)
        else:
            outcome = "completed"
        done = self._close_nodes(record, failed=isinstance(event, RunFailed))
        run.attributes["agentlog.outcome"] = outcome
        run.attributes["agentlog.end_seq"] = record.seq
        run.attributes["agentlog.end_hash"] = record.hash
        done.append(run.close(at))
        self._run = None
        return done

    def _abandon(self, record: EventRecord) -> list[Span]:
        """A run opened while one was still open (its process died before it ended it): the
        open one ends here, marked abandoned."""
        assert self._run is not None
        done = self._close_nodes(record)
        self._run.attributes["agentlog.outcome"] = "abandoned"
        done.append(self._run.close(_ns(record.at)))
        self._run = None
        return done

    def _is_edit(self, record: EventRecord, event: object) -> bool:
        """A change of state made by someone outside the run (`update_state`, an edit)."""
        if isinstance(event, StateUpdated) and event.source not in ("node", "tool"):
            return True
        return self._run is None or record.run_id is None

    def _note(self, record: EventRecord, name: str, attributes: Attributes) -> None:
        """An event of the run under way, or of the next one when none is."""
        attributes.update(_origin(record))
        target = self._run.events if self._run is not None else self._pending
        target.append(SpanEvent(name, _ns(record.at), attributes))

    # ---- steps, tools, model calls ---------------------------------------------------------

    def _open_node(self, record: EventRecord, event: NodeEntered | BranchEntered) -> list[Span]:
        run = self._ensure_run(record)
        key = f"{event.node}#{event.branch}" if isinstance(event, BranchEntered) else event.node
        done = []
        if key in self._nodes:  # entered again before its step closed: a retry after a crash
            done.append(self._nodes.pop(key).close(_ns(record.at)))
        attributes: Attributes = {"agentlog.node": event.node, **_origin(record)}
        if isinstance(event, BranchEntered):
            attributes["agentlog.branch"] = event.branch
        self._nodes[key] = _Open(
            name=event.node,
            trace_id=run.trace_id,
            span_id=span_id_of(self.thread_id, record.seq),
            parent_id=run.span_id,
            start_ns=_ns(record.at),
            attributes=attributes,
        )
        return done

    def _node_span(self, node: str | None) -> _Open | None:
        if node is not None:
            for key, span in self._nodes.items():
                if key == node or key.startswith(f"{node}#"):
                    return span
        return next(iter(self._nodes.values()), None) if len(self._nodes) == 1 else None

    def _parent(self, record: EventRecord, node: str | None) -> _Open:
        return self._node_span(node) or self._ensure_run(record)

    def _on_node(self, node: str, record: EventRecord, name: str, attributes: Attributes) -> None:
        attributes.update(_origin(record))
        self._parent(record, node).events.append(SpanEvent(name, _ns(record.at), attributes))

    def _close_nodes(
        self,
        record: EventRecord,
        *,
        step: int | None = None,
        duration_ms: float | None = None,
        failed: bool = False,
    ) -> list[Span]:
        done = [self._close_tool_span(tool, record, failed) for tool in self._tools.values()]
        self._tools.clear()
        for span in self._nodes.values():
            if step is not None:
                span.attributes["agentlog.step"] = step
            if duration_ms is not None and len(self._nodes) == 1:
                span.attributes["agentlog.duration_ms"] = duration_ms
            done.append(span.close(_ns(record.at)))
        self._nodes.clear()
        return done

    def _open_tool(self, record: EventRecord, event: ToolCallStarted) -> None:
        parent = self._parent(record, event.node)
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            **_origin(record),
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(event.args)
        self._tools[event.call_id] = _Open(
            name=f"execute_tool {event.name}",
            trace_id=parent.trace_id,
            span_id=span_id_of(self.thread_id, record.seq),
            parent_id=parent.span_id,
            start_ns=_ns(record.at),
            attributes=attributes,
        )

    def _close_tool(self, record: EventRecord, event: ToolCallFinished) -> list[Span]:
        span = self._tools.pop(event.call_id, None)
        if span is None:  # its start is not in the log (a tool node's own call): take it here
            parent = self._parent(record, record.actor)
            span = _Open(
                name=f"execute_tool {event.name}",
                trace_id=parent.trace_id,
                span_id=span_id_of(self.thread_id, record.seq),
                parent_id=parent.span_id,
                start_ns=_ns(record.at) - round(event.duration_ms * 1e6),
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": event.name,
                    "gen_ai.tool.call.id": event.call_id,
                    "gen_ai.tool.type": "function",
                    **_origin(record),
                },
            )
        span.attributes["agentlog.tool.status"] = event.status
        span.attributes["agentlog.duration_ms"] = event.duration_ms
        span.attributes["agentlog.end_seq"] = record.seq
        if event.status != "completed":
            span.fail(_error_type(event.error, event.status), event.error or event.status)
        if self.capture_content and event.output is not None:
            span.attributes["gen_ai.tool.call.result"] = _json(event.output)
        return [span.close(_ns(record.at))]

    @staticmethod
    def _close_tool_span(span: _Open, record: EventRecord, failed: bool) -> Span:
        """A tool call its step closed without a result (the run failed or paused)."""
        span.attributes["agentlog.tool.status"] = "unfinished"
        if failed:
            span.status = "error"
        return span.close(_ns(record.at))

    def _chat(self, record: EventRecord, event: ModelCalled) -> Span:
        parent = self._parent(record, event.node)
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": event.provider,
            "gen_ai.request.model": event.model,
            "agentlog.node": event.node,
            "agentlog.model.attempt": event.attempt,
            "agentlog.model.request_hash": event.request_hash,
            **_origin(record),
        }
        if counted(event.usage):
            tokens = tokens_of(event.usage)
            attributes["gen_ai.usage.input_tokens"] = tokens.input
            attributes["gen_ai.usage.output_tokens"] = tokens.output
            run = self._ensure_run(record)  # the call's tokens count towards its run's too
            for name, count in (("input", tokens.input), ("output", tokens.output)):
                key = f"gen_ai.usage.{name}_tokens"
                so_far = run.attributes.get(key, 0)
                run.attributes[key] = (so_far if isinstance(so_far, int) else 0) + count
        if event.finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (event.finish_reason,)
        if event.response_id is not None:
            attributes["gen_ai.response.id"] = event.response_id
        for name in ("temperature", "max_tokens", "top_p"):
            value = event.params.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[f"gen_ai.request.{name}"] = value
        end = _ns(record.at)
        span = _Open(
            name=f"chat {event.model}",
            trace_id=parent.trace_id,
            span_id=span_id_of(self.thread_id, record.seq),
            parent_id=parent.span_id,
            start_ns=end - round(event.latency_ms * 1e6),
            attributes=attributes,
        )
        if event.status == "failed":
            span.fail(event.error_type or "ModelError", event.error or "the model call failed")
        return span.close(end, "client")


def _given(**values: Attribute | None) -> Attributes:
    """The attributes given (None dropped), each named `agentlog.<name>` unless dotted."""
    return {
        (name if "." in name else f"agentlog.{name}"): value
        for name, value in values.items()
        if value is not None
    }


def _error_type(error: str | None, status: str) -> str:
    """The exception's type named at the start of a recorded error ("KeyError: ..."), else
    the tool call's status."""
    if error:
        head = error.split(":", 1)[0].strip()
        if head.isidentifier():
            return head
    return status


def thread_spans(records: Iterable[EventRecord], *, capture_content: bool = False) -> list[Span]:
    """Every finished span of a thread's records (given in seq order)."""
    fold: SpanFold | None = None
    spans: list[Span] = []
    for record in records:
        if fold is None:
            fold = SpanFold(record.thread_id, capture_content=capture_content)
        spans += fold.feed(record)
    return spans


def span_tree(spans: Sequence[Span]) -> list[tuple[int, Span]]:
    """The spans as a tree, depth first: (depth, span), children in start order (for
    printing and for tests)."""
    children: dict[int | None, list[Span]] = {}
    ids = {span.span_id for span in spans}
    for span in spans:
        parent = span.parent_id if span.parent_id in ids else None
        children.setdefault(parent, []).append(span)
    out: list[tuple[int, Span]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: (s.start_ns, s.span_id)):
            out.append((depth, span))
            walk(span.span_id, depth + 1)

    walk(None, 0)
    return out
