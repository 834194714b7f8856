"""After the fact: a thread's spans rebuilt from a database or from a verified export file,
the same spans a live follower emitted when the thread ran."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from agentlog.actors.otel.emit import Emitter
from agentlog.events.codec import Row, decode_row
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.record import EventRecord
from agentlog.events.store import EventStore, readable_thread_id
from agentlog.events.verify_export import GENESIS, Bad, check_line
from agentlog.projections.spans import Span, thread_spans

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider


class ExportFileError(InvalidArgumentError):
    """An export file that is not an intact agentlog export (a line fails its hash chain)."""


async def spans_of_thread(
    store: EventStore, thread_id: str, *, capture_content: bool = False
) -> list[Span]:
    """Every finished span of the thread, folded from its records as stored (each checked
    against its hash link as it is read)."""
    readable_thread_id(thread_id)
    return thread_spans(
        [record async for record in store.read(thread_id)], capture_content=capture_content
    )


def export_records(lines: Iterable[str]) -> list[EventRecord]:
    """The records of an export (`agentlog export`), each line checked as
    `verify_export.py` checks it (hash chain, envelope, readable event) before use."""
    records: list[EventRecord] = []
    thread: str | None = None
    prev = GENESIS
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            line = check_line(text.rstrip("\n"), thread, len(records) + 1, prev)
        except Bad as exc:
            raise ExportFileError(
                f"line {number} of the export is not intact ({exc}): check it with "
                "`python events/verify_export.py FILE`"
            ) from None
        thread, prev = line["thread_id"], line["hash"]
        row = Row(
            thread_id=line["thread_id"],
            seq=line["seq"],
            run_id=line["run_id"],
            actor=line["actor"],
            at=float(line["at"]) if line["at"] is not None else float("inf"),
            kind=line["kind"],
            version=line["version"],
            payload=base64.b64decode(line["payload_b64"]),
            hash=bytes.fromhex(line["hash"]),
            position=line["position"],
        )
        records.append(decode_row(row))
    if not records:
        raise ExportFileError("the export file holds no records")
    return records


def spans_of_export(path: str | Path, *, capture_content: bool = False) -> list[Span]:
    """Every finished span of the thread an export file holds."""
    with open(path, encoding="utf-8") as lines:
        return thread_spans(export_records(lines), capture_content=capture_content)


async def export_thread(
    store: EventStore,
    thread_id: str,
    tracer_provider: TracerProvider,
    *,
    capture_content: bool = False,
) -> list[Span]:
    """Emit the thread's spans through `tracer_provider` and flush it; the spans emitted."""
    spans = await spans_of_thread(store, thread_id, capture_content=capture_content)
    emitter = Emitter(tracer_provider)
    emitter.emit(spans)
    emitter.flush()
    return spans
