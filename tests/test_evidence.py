"""A signed evidence bundle of a thread: written by `agentlog export --evidence`, checked by
the single file events/verify_export.py run with `python -I` and `cryptography` alone."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from agentlog.actors import END, StateGraph
from agentlog.actors.engine.erasure import erase_subject
from agentlog.events import InvalidArgumentError, SQLiteEventStore
from agentlog.events.evidence import write_evidence
from agentlog.events.sealing import MASTER_KEY_ENV
from agentlog.projections import AgentState, Message

ROOT = Path(__file__).resolve().parents[1]
VERIFIER = ROOT / "events" / "verify_export.py"
SECRET = "Alice lives at 7 Rabbit Hole Lane"


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, base64.urlsafe_b64encode(bytes(range(32))).decode())


def keys(tmp_path: Path) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / "evidence.pem", tmp_path / "evidence.pub"
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    public.write_bytes(
        key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def checked(bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(VERIFIER), "--evidence", str(bundle), *args],
        capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip


async def _thread(db: Path) -> None:
    def reply(state: AgentState) -> list[Message]:
        return [Message.text_message("noted", role="assistant")]

    graph: StateGraph[AgentState] = StateGraph(AgentState)
    graph.add_node("reply", reply)
    graph.set_entry_point("reply")
    graph.add_edge("reply", END)
    async with SQLiteEventStore(db) as store:
        app = graph.compile(store)
        config = {"thread_id": "t", "subject": "alice"}
        await app.ainvoke({"messages": [Message.text_message(SECRET)]}, config)


async def test_a_bundle_verifies_alone_and_any_change_breaks_it(tmp_path: Path) -> None:
    db, (private, public) = tmp_path / "log.db", keys(tmp_path)
    await _thread(db)
    async with SQLiteEventStore(db) as store:
        bundle = await write_evidence(store, "t", tmp_path / "b.json", private.read_bytes())
    assert SECRET in json.dumps(bundle["opened"])  # decrypted: the key still exists
    assert "started a run" in bundle["report"]
    done = checked(tmp_path / "b.json", "--public-key", str(public))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 6 records") and "signed by Ed25519 key" in done.stdout
    (tmp_path / "other").mkdir()
    _, other_public = keys(tmp_path / "other")
    assert checked(tmp_path / "b.json", "--public-key", str(other_public)).returncode == 1
    for change in ("report", "opened", "export"):
        data = json.loads((tmp_path / "b.json").read_text())
        if change == "export":
            data["export"] = data["export"][:-1]
        else:
            data[change] = {"x": 1} if change == "opened" else "edited"
        (tmp_path / "bad.json").write_text(json.dumps(data))
        failed = checked(tmp_path / "bad.json")
        assert failed.returncode == 1 and "signature does not match" in failed.stdout, change


async def test_after_erasure_the_bundle_shows_the_erasure_and_no_plaintext(tmp_path: Path) -> None:
    db, (private, _) = tmp_path / "log.db", keys(tmp_path)
    await _thread(db)
    async with SQLiteEventStore(db) as store:
        await erase_subject(store, "alice", by="dpo", reason="Art. 17")
        await write_evidence(store, "t", tmp_path / "b.json", private.read_bytes())
    text = (tmp_path / "b.json").read_text()
    assert SECRET not in text and "erased on" in text
    assert "erased subject alice by dpo: Art. 17" in json.loads(text)["report"]
    assert checked(tmp_path / "b.json").returncode == 0


def test_the_cli_writes_a_bundle_and_refuses_a_wrong_key(tmp_path: Path) -> None:
    import asyncio

    db, (private, public) = tmp_path / "log.db", keys(tmp_path)
    asyncio.run(_thread(db))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    out = tmp_path / "bundle.json"
    done = cli("export", "t", "--evidence", "--signing-key", str(private), "--out", str(out),
               "--db", str(db))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert checked(out, "--public-key", str(public)).returncode == 0
    refused = cli("export", "t", "--evidence", "--signing-key", str(public), "--out",
                  str(tmp_path / "no.json"), "--db", str(db))  # fmt: skip
    assert refused.returncode == 1 and "not an unencrypted PEM private key" in refused.stderr
    assert not (tmp_path / "no.json").exists()


async def test_a_wrong_key_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    await _thread(db)
    async with SQLiteEventStore(db) as store:
        with pytest.raises(InvalidArgumentError, match="PEM"):
            await write_evidence(store, "t", tmp_path / "b.json", b"not a key")
    assert not (tmp_path / "b.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before", "after"])
@pytest.mark.parametrize("previous", [False, True])
def test_sigkill_during_an_evidence_export_leaves_no_bundle_the_previous_or_the_whole(
    tmp_path: Path, point: str, previous: bool
) -> None:
    import asyncio
    import os
    import signal

    from .helpers import ROOT, wait_ready

    db, out = tmp_path / "log.db", tmp_path / "bundle.json"
    private, public = keys(tmp_path)
    asyncio.run(_thread(db))
    if previous:

        async def first() -> None:
            async with SQLiteEventStore(db) as store:
                await write_evidence(store, "t", out, private.read_bytes())

        asyncio.run(first())
    before = out.read_bytes() if previous else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.evidence_run", str(db), str(out), str(private),
         point],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    wait_ready(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == point
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    if point == "before":  # the whole bundle sat in its temporary file, never renamed
        assert (out.read_bytes() if out.exists() else None) == before
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    else:
        assert out.read_bytes() != before
    if out.exists():
        result = checked(out, "--public-key", str(public))
        assert result.returncode == 0, result.stdout + result.stderr

    async def again() -> None:  # a later export sweeps what the killed one left
        async with SQLiteEventStore(db) as store:
            await write_evidence(store, "t", out, private.read_bytes(), overwrite=True)

    asyncio.run(again())
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert checked(out, "--public-key", str(public)).returncode == 0
