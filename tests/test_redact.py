"""Credentials stay out of the log: an MCP server whose URL carries a password or a query
token, or whose command line carries a token, dies mid-call, and neither its
`tool_call_finished` nor the tool message the model reads quotes the secret."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from agentlog.actors.engine.redact import MASK, known_secret, redact
from agentlog.actors.tools.mcp import HttpServer, Secret, StdioServer, mcp_tools
from tests.helpers import ROOT
from tests.test_mcp import run_with
from tests.workers.fake_provider import FakeProvider, Reply


@pytest.fixture
def dying_http_port() -> Iterator[int]:
    """A server of its own, since its `die` tool ends it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers.mcp_server", "http"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    try:
        yield int(proc.stdout.readline().split()[1])
    finally:
        proc.kill()
        proc.wait(timeout=30)


def assert_hidden(finished: dict[str, object], state: object, *secrets: str) -> None:
    died = finished["call-2"]
    error = getattr(died, "error", None)
    assert getattr(died, "status", None) == "failed" and error is not None
    assert error.startswith("McpConnectionError: ")
    seen = [m.model_dump_json() for m in state.context]  # type: ignore[attr-defined]
    for secret in secrets:
        assert secret not in error, error
        assert not any(secret in text for text in seen)
    assert MASK in error


async def test_a_stdio_server_with_a_token_argument_dies_without_telling_it() -> None:
    server = StdioServer(
        sys.executable,
        ["-m", "tests.workers.mcp_server", "stdio", "--token", Secret("tok-9f8e7d6c")],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
    )
    assert "tok-9f8e7d6c" not in server.label and repr(server).count("tok-9f8e7d6c") == 0
    async with mcp_tools(server) as tools:
        state, finished, _ = await run_with(tools, [("add", {"a": 1, "b": 1})], [("die", {})])
    assert_hidden(finished, state, "tok-9f8e7d6c")


async def test_an_http_server_with_a_password_and_a_query_token_dies_without_telling_it(
    dying_http_port: int,
) -> None:
    url = f"http://agent:pa55-w0rd@127.0.0.1:{dying_http_port}/mcp?access_token=qt-123456"
    server = HttpServer(url, headers={"X-Api-Key": "hk-abcdef"})
    assert server.label == f"http://{MASK}@127.0.0.1:{dying_http_port}/mcp?access_token={MASK}"
    async with mcp_tools(server) as tools:
        state, finished, _ = await run_with(tools, [("add", {"a": 1, "b": 1})], [("die", {})])
    assert_hidden(finished, state, "pa55-w0rd", "qt-123456", "hk-abcdef")


def test_redact_hides_urls_flags_and_known_values() -> None:
    known_secret("zz-known-value")
    text = (
        "GET https://u:p@h/x?a=1&api_key=K1&token=T2 failed; ran srv --password hunter2 "
        "--auth-token=abc --verbose 3, with zz-known-value"
    )
    said = redact(text)
    for secret in ("u:p", "K1", "T2", "hunter2", "abc", "zz-known-value"):
        assert secret not in said, said
    assert "a=1" in said and "--verbose 3" in said and "https://***@h/x" in said


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as running:
        yield running


async def test_a_model_providers_error_quoting_a_keyed_url_is_recorded_redacted(
    provider: FakeProvider,
) -> None:
    from tests.test_models_node import CFG, QUESTION, app, model_calls, node, openai_client

    said = {"error": {"message": "upstream https://llm.example/v1?api_key=sk-live-7f3a9 said no"}}
    provider.script(Reply(status=503, body=said))
    graph = app(node(openai_client(provider)))
    await graph.ainvoke({"messages": [QUESTION]}, CFG)
    failed, _ = await model_calls(graph)
    assert failed.status == "failed" and failed.error is not None
    assert "sk-live-7f3a9" not in failed.error and f"api_key={MASK}" in failed.error
