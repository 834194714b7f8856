"""Rotating the master key: every subject key re-wrapped under the new one in one transaction.

Every store kind; the CLI; a rerun; a wrong old key refused with nothing changed; a worker
SIGKILLed inside the rotation's transaction, and after it, leaving the database under
exactly one of the two keys with every subject readable.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentlog.actors.engine.erasure import erase_subject
from agentlog.events import (
    EventStore,
    InvalidArgumentError,
    MessageAppended,
    SQLiteEventStore,
)
from agentlog.events.keystore import DatabaseKeyStore, keyring, rotate_master_key, tag_thread
from agentlog.events.sealing import MASTER_KEY_ENV, SealingError, SubjectKey

from .helpers import ROOT, spawn_worker, wait_ready
from .workers.pg_env import BACKENDS, backend_store

OLD, NEW, OTHER = bytes(range(32)), bytes(range(1, 33)), bytes(range(2, 34))
SECRET = "Alice Liddell lives at 7 Rabbit Hole Lane"


def b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MASTER_KEY_ENV, b64(OLD))


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EventStore]:
    async with backend_store(request.param, tmp_path) as opened:
        yield opened


async def _subjects(store: EventStore, count: int) -> None:
    for i in range(count):
        await tag_thread(store, f"t{i}", f"s{i}")
        message = {"message_id": "m", "role": "user", "content": [{"type": "text",
                   "text": f"{SECRET} #{i}"}]}  # fmt: skip
        await store.append(f"t{i}", [MessageAppended(message=message)], expected_seq=0)


async def _opens_under(store: EventStore, master: bytes, count: int) -> dict[str, SubjectKey]:
    """Every subject's key read under `master` alone (SealingError when one does not open)."""
    return await DatabaseKeyStore(keyring(store).tables, master).get(
        {f"s{i}" for i in range(count)}
    )


async def _texts(store: EventStore, count: int) -> str:
    return " ".join([str(r.event) for i in range(count) async for r in store.read(f"t{i}")])


async def test_rotation_rewraps_every_key_and_keeps_erasures(store: EventStore) -> None:
    await _subjects(store, 3)
    await erase_subject(store, "s2", by="dpo", reason="request")
    before = await _opens_under(store, OLD, 3)
    assert await rotate_master_key(store, NEW) == 2  # the erased one has no key to re-wrap
    after = await _opens_under(store, NEW, 3)
    assert after == before  # the same data keys, the same erasure
    with pytest.raises(SealingError, match="does not open under this master key"):
        await _opens_under(store, OLD, 3)
    text = await _texts(store, 3)
    assert f"{SECRET} #0" in text and f"{SECRET} #1" in text and f"{SECRET} #2" not in text
    await _subjects_after(store)
    assert await rotate_master_key(store, NEW, old_master=OLD) == 0  # a rerun changes nothing


async def _subjects_after(store: EventStore) -> None:
    """A subject made after the rotation, in the same process, is wrapped under the new key."""
    await tag_thread(store, "late", "late")
    await store.append("late", [MessageAppended(message={"message_id": "m", "role": "user",
                       "content": [{"type": "text", "text": "x"}]})], expected_seq=0)  # fmt: skip
    assert (await DatabaseKeyStore(keyring(store).tables, NEW).get({"late"}))["late"]


async def test_a_wrong_old_key_or_a_bad_new_one_changes_nothing(store: EventStore) -> None:
    await _subjects(store, 2)
    with pytest.raises(SealingError, match="does not open"):
        await rotate_master_key(store, NEW, old_master=OTHER)
    with pytest.raises(InvalidArgumentError, match="32 random bytes"):
        await rotate_master_key(store, b"short")
    with pytest.raises(InvalidArgumentError, match="the one in use"):
        await rotate_master_key(store, OLD)
    assert len(await _opens_under(store, OLD, 2)) == 2


def _cli(*args: str, key: bytes, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()", *args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, MASTER_KEY_ENV: b64(key), **env},
    )  # fmt: skip


def test_the_cli_rotates_from_a_file_or_a_variable(tmp_path: Path) -> None:
    db = tmp_path / "log.db"

    async def prepare() -> None:
        async with SQLiteEventStore(db) as store:
            await _subjects(store, 2)

    asyncio.run(prepare())
    (tmp_path / "new.key").write_text(b64(NEW) + "\n")
    done = _cli("keys", "rotate", "--new-key-file", str(tmp_path / "new.key"), "--db", str(db),
                key=OLD)  # fmt: skip
    assert done.returncode == 0 and "2 subject key(s) re-wrapped" in done.stdout, done
    refused = _cli(
        "keys", "rotate", "--new-key-env", "NEXT", "--db", str(db), key=OLD, NEXT=b64(OTHER)
    )
    assert refused.returncode != 0 and "does not open under this master key" in refused.stderr
    done = _cli(
        "keys", "rotate", "--new-key-env", "NEXT", "--db", str(db), key=NEW, NEXT=b64(OTHER)
    )
    assert done.returncode == 0 and "2 subject key(s)" in done.stdout, done
    neither = _cli("keys", "rotate", "--db", str(db), key=OTHER)
    assert neither.returncode != 0 and "--new-key-file" in neither.stderr

    async def check() -> None:
        async with SQLiteEventStore(db) as store:
            assert len(await _opens_under(store, OTHER, 2)) == 2

    asyncio.run(check())


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [1, 150, 300, 0, None])
def test_sigkill_during_rotation_leaves_the_old_keys_or_the_new_never_half(
    tmp_path: Path, kill_at: int | None
) -> None:
    db, count = tmp_path / "log.db", 300

    async def prepare() -> None:
        async with SQLiteEventStore(db) as store:
            await _subjects(store, count)

    async def under() -> bytes:
        """The one master key every subject key opens under now."""
        async with SQLiteEventStore(db) as store:
            opened = []
            for master in (OLD, NEW):
                with contextlib.suppress(SealingError):
                    opened.append((master, await _opens_under(store, master, count)))
            assert len(opened) == 1, "the keys are under both master keys, or neither"
            master, keys = opened[0]
            assert len(keys) == count and all(isinstance(k, bytes) for k in keys.values())
            keyring(store).keys = DatabaseKeyStore(keyring(store).tables, master)
            text = await _texts(store, count)
            assert all(f"{SECRET} #{i}" in text for i in range(count))
            return master

    asyncio.run(prepare())
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.rotate_run", str(db), b64(NEW), str(kill_at or "")],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    wait_ready(proc)
    assert proc.stdout is not None
    if kill_at is None:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and f"done {count}" in out, err
        assert asyncio.run(under()) == NEW
    elif kill_at == 0:  # anywhere: before, inside or after the transaction
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        asyncio.run(under())
    else:
        assert proc.stdout.readline().strip() == f"wrapped {kill_at}"
        os.kill(proc.pid, signal.SIGKILL)  # inside the transaction: nothing committed yet
        proc.communicate(timeout=30)
        assert asyncio.run(under()) == OLD
    rerun = spawn_worker("rotate_run", db, b64(NEW), "")  # safe whatever the outcome was
    wait_ready(rerun)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0 and "done" in out, err
    assert asyncio.run(under()) == NEW
