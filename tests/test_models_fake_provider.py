"""The tests' fake provider refuses what the real APIs refuse, so a converter that sends
an unpaired tool result or no messages fails a test rather than a user's first run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.workers.fake_provider import invalid

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
USE = {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "c1", "content": "ok"}


@pytest.mark.parametrize(
    ("path", "body", "refused"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": []}, "at least one message"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "model"),
        (
            "/v1/chat/completions",
            {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c1", "content": "x"}]},
            "must be a response to a preceding",
        ),
        (
            "/v1/chat/completions",
            {
                "model": "m",
                "messages": [
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "user", "content": "and?"},
                ],
            },
            "must be followed by tool messages",
        ),
        (
            "/v1/messages",
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            "max_tokens",
        ),
        ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": []}, "at least one message"),
        (
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [RESULT]}]},
            "unexpected tool_use_id",
        ),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {"role": "assistant", "content": [USE]},
                    {"role": "user", "content": [{"type": "text", "text": "and?"}]},
                ],
            },
            "without tool_result blocks",
        ),
        ("/v1/responses", {"model": "m", "input": []}, "'input' is required"),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]},
                ],
            },
            "thinking.signature",
        ),
    ],
)
def test_what_the_real_api_refuses_is_refused(path: str, body: Any, refused: str) -> None:
    assert refused in (invalid(path, body) or "")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/chat/completions",
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                ],
            },
        ),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [USE]},
                    {"role": "user", "content": [RESULT]},
                ],
            },
        ),
        ("/v1/responses", {"model": "m", "input": [], "instructions": "say hi"}),
    ],
)
def test_what_the_real_api_takes_is_taken(path: str, body: Any) -> None:
    assert invalid(path, body) is None
