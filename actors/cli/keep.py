"""`agentlog export`, `erase`, `prune` and `vacuum`: keep, forget and still prove (see
docs/compliance.md).

Registered on the `agentlog` app when `agentlog.actors.cli` loads; the engine is imported
only when a command runs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import IO, Annotated

import typer
from rich.text import Text

from agentlog.actors.cli import (
    AsJson,
    CliError,
    Db,
    Format,
    Thread,
    _echo_json,
    _print,
    _run,
    app,
    errors,
    render,
)
from agentlog.events import AgentlogError, EventStore
from agentlog.events.audit import Head, export_jsonl

Subject = Annotated[
    str, typer.Argument(metavar="SUBJECT", help="The data subject's id, as tagged on its threads.")
]


@app.command("erase")
def erase_command(
    subject: Subject,
    by: Annotated[str, typer.Option("--by", help="Who erases (recorded).")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded), e.g. the request.")],
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Erase a data subject: destroy its key, so its personal fields read "erased on DATE by
    WHO" everywhere, and record who, why and when; every chain still verifies. Safe to rerun.
    Run `agentlog vacuum` after it to rewrite the file without the freed pages."""
    from agentlog.actors.engine.erasure import ErasureReport, erase_subject

    async def job(store: EventStore) -> ErasureReport:
        return await erase_subject(store, subject, by=by, reason=reason)

    report = _run(job, db, writes=True)
    erasure = report.erasure
    day = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(erasure.at))
    if as_json:
        _echo_json(
            {"subject": subject, "erased_at": erasure.at, "by": erasure.by,
             "reason": erasure.reason, "threads": report.threads, "recorded": report.recorded}
        )  # fmt: skip
        return
    said = "erased" if report.recorded else "already erased"
    _print(
        Text(
            render.inert(
                f"{said}: subject {subject} on {day} by {erasure.by} ({erasure.reason}); "
                f"{len(report.threads)} thread(s) sealed under its key"
            )
        )
    )


@app.command("vacuum")
def vacuum_command(db: Db = "agentlog.db") -> None:
    """Rewrite the database without the pages erasures and prunes freed (SQLite VACUUM and
    its WAL truncated; PostgreSQL VACUUM FULL), so no byte of what they removed remains."""
    from agentlog.events.keystore import vacuum

    _run(vacuum, db, writes=True)
    typer.echo("vacuumed")


@app.command("prune")
def prune_command(
    thread: Annotated[
        str | None, typer.Option("--thread", help="Prune this thread only (default: every one).")
    ] = None,
    keep_runs: Annotated[
        int | None, typer.Option("--keep-runs", help="Keep the last N runs of each thread.")
    ] = None,
    keep_days: Annotated[
        float | None, typer.Option("--keep-days", help="Keep the runs begun in the last N days.")
    ] = None,
    ttl_days: Annotated[
        float | None,
        typer.Option("--ttl-days", help="Prune whole each thread idle for more than N days."),
    ] = None,
    do_vacuum: Annotated[
        bool, typer.Option("--vacuum", help="Then rewrite the file without the freed pages.")
    ] = False,
    by: Annotated[str, typer.Option("--by", help="Who prunes (recorded).")] = "agentlog",
    reason: Annotated[str | None, typer.Option("--reason", help="Why (recorded).")] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Remove the records before the runs kept (the last run always stays) from behind a
    snapshot, leaving a `pruned` record the rest of the chain links to: every thread still
    verifies, reads and resumes. Export a thread first to keep its history elsewhere."""
    from agentlog.actors.engine.retention import PruneReport, prune_thread
    from agentlog.actors.engine.threads import internal_threads
    from agentlog.events.keystore import vacuum
    from agentlog.projections.generic import open_states

    if sum(x is not None for x in (keep_runs, keep_days, ttl_days)) != 1:
        raise typer.BadParameter("name what to keep: --keep-runs N, --keep-days N or --ttl-days N")

    async def job(store: EventStore) -> list[PruneReport]:
        threads = [thread] if thread is not None else await store.threads()
        if thread is None:
            threads = [t for t in threads if t not in await internal_threads(store, threads)]
        reports = []
        for one in threads:
            (now,) = await open_states(store, one, [await store.last_seq(one)])
            report = await prune_thread(
                store, one, keep_runs=keep_runs, keep_days=keep_days, idle_days=ttl_days, by=by,
                reason=reason,
                state_cls=type(now.state),
            )  # fmt: skip
            if report is not None:
                reports.append(report)
        if do_vacuum:
            await vacuum(store)
        return reports

    reports = _run(job, db, thread, writes=True)
    if as_json:
        _echo_json([
            {"thread_id": r.thread_id, "through_seq": r.through_seq, "removed": r.removed,
             "snapshot_digest": r.snapshot_digest} for r in reports
        ])  # fmt: skip
        return
    for r in reports:
        _print(Text(render.inert(f"pruned {r.thread_id}: {r.removed} records through seq "
                                 f"{r.through_seq}")))  # fmt: skip
    typer.echo(f"{len(reports)} thread(s) pruned" + (", vacuumed" if do_vacuum else ""))


async def _export(store: EventStore, thread: str, out: Path | None, overwrite: bool) -> Head:
    with render.progress(errors, f"exporting {render.inert(thread)}") as update:
        target: IO[str] | Path = sys.stdout if out is None else out
        return await export_jsonl(store, thread, target, progress=update, overwrite=overwrite)


@app.command("export")
def export_command(
    thread: Thread,
    fmt: Annotated[Format, typer.Option("--format", help="The export format.")] = Format.jsonl,
    out: Annotated[
        Path | None, typer.Option("--out", help="The file to write (default: stdout).")
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace --out when it already exists.")
    ] = False,
    evidence: Annotated[
        bool,
        typer.Option("--evidence", help="Write a signed evidence bundle (needs --signing-key)."),
    ] = False,
    signing_key: Annotated[
        Path | None,
        typer.Option("--signing-key", help="The Ed25519 private key (PEM) that signs it."),
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Write the thread's records for an audit (check with events/verify_export.py).

    The head (THREAD@SEQ:HASH) is printed on stdout with --out, else on stderr. With
    --evidence, one signed JSON bundle: the records, the head, a short report for people,
    an Ed25519 signature (check with `python -I events/verify_export.py --evidence FILE`).
    """
    if evidence:
        _evidence(thread, out, overwrite, signing_key, db, as_json)
        return
    exported = _run(lambda store: _export(store, thread, out, overwrite), db, thread)
    if as_json:
        report = {"thread_id": thread, "format": fmt.value, "records": exported.seq}
        report |= {"head": str(exported), "hash": exported.hash, "out": out and str(out)}
        typer.echo(json.dumps(report), err=out is None)
    elif out is None:
        typer.echo(f"head: {render.inert(str(exported))}", err=True)
    else:
        said = Text(f"exported {exported.seq} records of {render.inert(thread)} to ")
        said.append(render.inert(str(out)))
        _print(said)
        typer.echo(f"head: {render.inert(str(exported))}")


def _evidence(
    thread: str, out: Path | None, overwrite: bool, key: Path | None, db: str, as_json: bool
) -> None:
    from agentlog.events.evidence import write_evidence

    if key is None or out is None:
        raise typer.BadParameter("an evidence bundle needs --signing-key PEM and --out FILE")
    try:
        pem = key.read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {key}: {exc}", param_hint="--signing-key") from None

    async def job(store: EventStore) -> dict[str, object]:
        try:
            return await write_evidence(store, thread, out, pem, overwrite=overwrite)
        except ImportError as exc:  # pragma: no cover - cryptography is a dependency of it
            raise CliError(
                f"signing needs 'cryptography' (pip install 'agentlog[crypto]'): {exc}"
            ) from None

    bundle = _run(job, db, thread)
    head = bundle["head"]
    assert isinstance(head, dict)
    if as_json:
        _echo_json({"thread_id": thread, "out": str(out), "head": head, "evidence": True})
    else:
        _print(Text(render.inert(f"evidence of {thread} (head seq {head['seq']}) in {out}")))


keys_app = typer.Typer(
    name="keys", help="Manage the master key subject keys are wrapped under.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")


@keys_app.command("rotate")
def rotate_command(
    new_key_file: Annotated[
        Path | None, typer.Option("--new-key-file", help="A file holding the new master key.")
    ] = None,
    new_key_env: Annotated[
        str | None,
        typer.Option("--new-key-env", help="The environment variable holding the new master key."),
    ] = None,
    db: Db = "agentlog.db",
    as_json: AsJson = False,
) -> None:
    """Re-wrap every subject key under a new master key, in one transaction (the old one is
    read from AGENTLOG_MASTER_KEY or AGENTLOG_MASTER_KEY_FILE as usual). Stop the writers
    first, then restart them with the new key. Safe to rerun with the same two keys."""
    import os

    from agentlog.events.keystore import rotate_master_key
    from agentlog.events.sealing import MASTER_KEY_ENV, MASTER_KEY_FILE_ENV, load_master_key

    if (new_key_file is None) == (new_key_env is None):
        raise typer.BadParameter(
            "name the new master key: --new-key-file PATH or --new-key-env VAR"
        )
    if new_key_env is not None and not os.environ.get(new_key_env):
        raise typer.BadParameter(f"{new_key_env} is not set", param_hint="--new-key-env")
    where = (
        {MASTER_KEY_FILE_ENV: str(new_key_file)}
        if new_key_env is None
        else {MASTER_KEY_ENV: os.environ[new_key_env]}
    )
    try:
        new = load_master_key(where)
    except AgentlogError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def job(store: EventStore) -> int:
        return await rotate_master_key(store, new)

    changed = _run(job, db, writes=True)
    if as_json:
        _echo_json({"rotated": changed})
    else:
        typer.echo(f"{changed} subject key(s) re-wrapped under the new master key")
