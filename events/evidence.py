"""A signed evidence bundle of one thread: its records, its head, a short report, a signature.

`write_evidence(store, thread_id, out, signing_key_pem)` writes one JSON file:

    format          "agentlog-evidence/1"
    thread_id       the thread
    created_at      when the bundle was made (epoch seconds)
    head            {"seq": ..., "hash": ...}: the thread's last record
    pruned_through  the seq records were pruned through (0: none)
    subject         the data subject the thread is tagged with, or null
    export          the thread's records as `agentlog export` writes them, one JSON line each
                    (sealed payloads stay sealed: the chain hashes cover those bytes)
    opened          for each sealed record, by seq, its event as the store reads it now:
                    decrypted where the subject's key still exists, "erased on DATE by WHO"
                    where it does not
    erasures        the `erased` records of the thread's subject
    report          a short text for people: who did what when, human edits, tool calls
                    and their side effects, prunes, erasures
    public_key      the Ed25519 public key (raw, base64) the bundle is signed with
    signature       Ed25519 over the canonical JSON of every other field (sorted keys, no
                    spaces, ASCII), base64

`events/verify_export.py --evidence FILE [--public-key PEM]` checks it with the standard
library and `cryptography` alone: the signature, then the records' chain and head.
"""

from __future__ import annotations

import base64
import io
import json
import os
import time
from typing import Any

import msgspec

from agentlog.events.audit import ExportFile, export_jsonl
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.keystore import ERASURE_THREAD, pruned_floor, subject_of_thread
from agentlog.events.kinds import (
    Erased,
    MessageReplaced,
    MessagesRemoved,
    MessagesReplaced,
    Pruned,
    Resumed,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    StateUpdated,
    ToolCallFinished,
)
from agentlog.events.record import EventRecord
from agentlog.events.sealing import is_sealed
from agentlog.events.store import EventStore
from agentlog.events.verify_export import canonical

__all__ = ["FORMAT", "canonical", "evidence_bundle", "write_evidence"]

FORMAT = "agentlog-evidence/1"


def _signing_key(pem: bytes) -> Any:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(
            f"the signing key is not an unencrypted PEM private key ({exc}): make one with "
            "`openssl genpkey -algorithm ed25519 -out evidence.pem`"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidArgumentError(
            f"the signing key is {type(key).__name__}, not Ed25519: make one with "
            "`openssl genpkey -algorithm ed25519 -out evidence.pem`"
        )
    return key


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def _line(record: EventRecord) -> str | None:
    """One line of the report for a record that a person reviewing the thread asks about."""
    e, who = record.event, record.actor or "?"
    head = f"{_when(record.at)} seq {record.seq} {who}:"
    if isinstance(e, RunStarted):
        return f"{head} started a run at {e.entry_node}"
    if isinstance(e, Resumed):
        return f"{head} resumed the run" + (f" at {e.node}" if e.node else "")
    if isinstance(e, StateUpdated) and e.source != "node":
        return f"{head} human edit ({e.source}) of {', '.join(sorted(e.values)) or 'nothing'}"
    if isinstance(e, MessageReplaced | MessagesReplaced | MessagesRemoved) and who != "node":
        return f"{head} human edit: {record.kind}"
    if isinstance(e, ToolCallFinished):
        return f"{head} tool {e.name} call {e.call_id}: {e.status} in {e.duration_ms:.0f} ms"
    if isinstance(e, RunCompleted | RunFailed | RunCancelled):
        return f"{head} {record.kind}"
    if isinstance(e, Pruned):
        return f"{head} pruned {e.removed} records through seq {e.through_seq}"
    return None


async def evidence_bundle(
    store: EventStore, thread_id: str, signing_key_pem: bytes, *, now: float | None = None
) -> dict[str, Any]:
    """The signed bundle of `thread_id` (see the module)."""
    key = _signing_key(signing_key_pem)
    out = io.StringIO()
    head = await export_jsonl(store, thread_id, out)
    floor = await pruned_floor(store, thread_id)
    subject = await subject_of_thread(store, thread_id)
    sealed = {row.seq async for row in store.read_rows(thread_id) if is_sealed(row.payload)}
    opened: dict[str, Any] = {}
    lines = [f"Evidence of thread {thread_id}, head seq {head.seq} {head.hash}"]
    if subject is not None:
        lines.append(f"Data subject: {subject}")
    async for record in store.read(thread_id):
        if record.seq in sealed:
            opened[str(record.seq)] = msgspec.to_builtins(record.event)
        said = _line(record)
        if said is not None:
            lines.append(said)
    erasures: list[dict[str, Any]] = []
    if subject is not None and await store.last_seq(ERASURE_THREAD):
        async for record in store.read(ERASURE_THREAD):
            if isinstance(record.event, Erased) and record.event.subject == subject:
                e = record.event
                erasures.append(msgspec.to_builtins(e))
                lines.append(f"{_when(e.erased_at)} erased subject {e.subject} by {e.by}: "
                             f"{e.reason}")  # fmt: skip
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    body: dict[str, Any] = {
        "format": FORMAT,
        "thread_id": thread_id,
        "created_at": time.time() if now is None else now,
        "head": {"seq": head.seq, "hash": head.hash},
        "pruned_through": 0 if floor is None else floor[0],
        "subject": subject,
        "export": out.getvalue().splitlines(),
        "opened": opened,
        "erasures": erasures,
        "report": "\n".join(lines) + "\n",
        "public_key": base64.b64encode(public).decode("ascii"),
    }
    body["signature"] = base64.b64encode(key.sign(canonical(body))).decode("ascii")
    return body


async def write_evidence(
    store: EventStore,
    thread_id: str,
    out: str | os.PathLike[str],
    signing_key_pem: bytes,
    *,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the bundle to `out` (a new file, renamed into place once whole, so a process
    killed meanwhile leaves no bundle, or the whole one); the bundle written."""
    bundle = await evidence_bundle(store, thread_id, signing_key_pem)
    with ExportFile(out, protect=store.files(), overwrite=overwrite) as file:
        file.write(json.dumps(bundle, indent=1, ensure_ascii=True) + "\n")
    return bundle
