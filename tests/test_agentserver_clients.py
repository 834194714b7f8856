"""LangGraph's own clients against `agentlog serve`, unchanged: a real server process on an
ephemeral loopback port with a token file, and the official `langgraph-sdk` and
`RemoteGraph` (in LangGraph's venv) running one program of calls with `api_key=` (sent as
`x-api-key`), each call asserting its answer's shape as the SDK's TypedDicts declare it.

LangGraph's JavaScript SDK (from the npm registry, run by Node) creates a thread, streams a
run in `messages-tuple` and `values` modes, streams a chat model's token chunks and a node's
custom part live, and resumes an interrupt.

The program prints one line per call; this test holds the counts to the floor below, and
names every call that must work (the one left out is refused by design)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentlog.actors.http import hash_token
from tests.helpers import ROOT
from tests.test_cli_serve import start

PEER = ROOT / ".bench-venvs" / "langgraph" / "bin" / "python"
PROGRAM = ROOT / "tests" / "agentserver" / "sdk_program.py"
JS = ROOT / "tests" / "agentserver" / "js"
APP = "tests.agentserver.app:build"
NOT_SERVED = {
    "runs.delete",
}
"""The SDK calls of the program this server refuses: a run is never deleted (409), since a
log only grows."""


@pytest.fixture(scope="module")
def peer() -> Path:
    if not PEER.exists():
        if os.environ.get("AGENTLOG_PEERS") == "required":
            pytest.fail(
                f"LangGraph's venv is missing: run `{sys.executable} bench/venvs.py langgraph`"
            )
        pytest.skip("LangGraph's venv is missing: `make test` makes it (bench/venvs.py langgraph)")
    return PEER


@contextlib.contextmanager
def serving(tmp_path: Path) -> Iterator[str]:
    """A real `agentlog serve` with one token (`sk-ann`, every right), until the block ends."""
    tokens = tmp_path / "tokens.json"
    entry = {"name": "ann", "sha256": hash_token("sk-ann"), "graphs": ["*"], "rights": ["admin"]}
    tokens.write_text(json.dumps({"tokens": [entry]}))
    proc, url = start(tmp_path / "db.sqlite", "--tokens", str(tokens), app=APP)
    try:
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_the_sdk_and_remote_graph_work_unchanged(tmp_path: Path, peer: Path) -> None:
    with serving(tmp_path) as url:
        ran = subprocess.run(
            [str(peer), str(PROGRAM), url, "sk-ann"],
            capture_output=True, text=True, timeout=600, cwd=ROOT,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-4000:]
    calls = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    sdk = {c["call"]: c for c in calls if c["client"] == "sdk"}
    remote = {c["call"]: c for c in calls if c["client"] == "remote"}
    assert len(remote) == 13 and len(sdk) >= 64, (len(sdk), len(remote))
    failed = {name: c["error"] for name, c in {**sdk, **remote}.items() if not c["ok"]}
    assert set(failed) <= NOT_SERVED, {k: v for k, v in failed.items() if k not in NOT_SERVED}
    counts = {"sdk_ok": sum(c["ok"] for c in sdk.values()), "sdk": len(sdk)}
    counts |= {"remote_ok": sum(c["ok"] for c in remote.values()), "remote": len(remote)}
    print(json.dumps(counts))


@pytest.fixture(scope="module")
def node_client() -> Path:
    """LangGraph's JavaScript SDK, installed from the npm registry by its package.json."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        if os.environ.get("AGENTLOG_PEERS") == "required":
            pytest.fail("node and npm are needed for the JavaScript SDK's test")
        pytest.skip("node and npm are missing: the JavaScript SDK's test needs them")
    if not (JS / "node_modules" / "@langchain" / "langgraph-sdk").exists():
        installed = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund"],
            cwd=JS, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr[-2000:]
    return Path(node)


def test_the_javascript_sdk_streams_and_resumes(tmp_path: Path, node_client: Path) -> None:
    with serving(tmp_path) as url:
        ran = subprocess.run(
            [str(node_client), "program.mjs", url, "sk-ann"],
            capture_output=True, text=True, timeout=300, cwd=JS,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-4000:]
    calls = {c["call"]: c for c in map(json.loads, ran.stdout.splitlines())}
    assert set(calls) == {
        "threads.create",
        "runs.stream(messages-tuple, values)",
        "runs.stream(custom, messages-tuple) token chunks",
        "resume an interrupt",
    }
    assert all(c["ok"] for c in calls.values()), calls
