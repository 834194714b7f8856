"""The OpenAPI document, fuzzed: every operation it lists, called with arbitrary path values,
query values and JSON bodies, never answers 5xx, never shows a traceback, always answers
JSON errors with a code, and a refused request writes nothing to the log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.serve import create_app
from events import SQLiteEventStore
from events.follow import last_position
from tests.test_serve import build

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
segments = st.sampled_from(["t", "ghost", "__runtime__", "%20", "x" * 300, "0"]) | st.text(
    st.characters(whitelist_categories=("Ll", "Nd")), min_size=1, max_size=12
)


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "delete", "put", "patch")
    ]


def fill(path: str, values: list[str]) -> str:
    parts = []
    for part in path.split("/"):
        if part.startswith("{") and part.endswith("}"):
            parts.append(values.pop() if values else "t")
        else:
            parts.append(part)
    return "/".join(parts)


def test_no_operation_answers_5xx_or_writes_when_it_refuses(tmp_path: Path) -> None:
    asyncio.run(fuzz(tmp_path))


async def fuzz(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "fuzz.db") as store:
        runtime = build(store)
        app = create_app(runtime, max_body=10_000)
        async with runtime:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
                await client.post(
                    "/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                spec = (await client.get("/openapi.json")).json()
                ops = operations(spec)
                assert len(ops) >= 15
                calls: list[tuple[str, str, Any, dict[str, str]]] = []

                @settings(
                    max_examples=150,
                    deadline=None,
                    derandomize=True,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
                @given(
                    st.sampled_from(ops),
                    st.lists(segments, min_size=3, max_size=3),
                    json_values,
                    st.dictionaries(
                        st.sampled_from(["step", "limit", "after", "timeout", "reason"]),
                        st.text(max_size=6),
                        max_size=2,
                    ),
                )
                def draw(op: Any, values: list[str], body: Any, query: dict[str, str]) -> None:
                    method, path, _ = op
                    calls.append((method, fill(path, list(values)), body, query))

                draw()
                for method, url, body, query in calls:
                    if url.endswith("/stream"):
                        continue  # streams wait for records: checked in test_serve.py
                    before = await last_position(store)
                    kwargs: dict[str, Any] = {"params": query}
                    if method in ("POST", "PUT", "PATCH"):
                        kwargs["content"] = json.dumps(body)
                        kwargs["headers"] = {"content-type": "application/json"}
                    response = await client.request(method, url, **kwargs)
                    answer = f"{response.status_code} {response.text[:200]}"
                    where = f"{method} {url} {body!r:.80} -> {answer}"
                    assert response.status_code < 500, where
                    assert "Traceback" not in response.text, where
                    if response.status_code >= 400:
                        assert response.json()["error"]["code"], where
                        assert await last_position(store) == before, f"a refusal wrote: {where}"
