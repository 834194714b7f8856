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

from agentlog.actors.http import create_app
from agentlog.events import SQLiteEventStore
from agentlog.events.follow import last_position
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
            local = "http://127.0.0.1"  # a Host the server answers for
            async with httpx.AsyncClient(transport=transport, base_url=local) as client:
                await client.post(
                    "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
                )
                spec = (await client.get("/openapi.json")).json()
                ops = operations(spec)
                assert len(ops) >= 15
                calls: list[tuple[str, str, Any, dict[str, str], dict[str, Any]]] = []

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
                    method, path, declared = op
                    calls.append((method, fill(path, list(values)), body, query, declared))

                draw()
                for method, url, body, query, declared in calls:
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
                    if not url.startswith(("/log/", "/ok", "/ready")):  # the Agent Server's
                        assert str(response.status_code) in declared["responses"], where
                    if response.status_code >= 400:
                        assert response.json()["error"]["code"], where
                        assert await last_position(store) == before, f"a refusal wrote: {where}"


def test_the_streams_refuse_in_json_and_write_nothing(tmp_path: Path) -> None:
    """The two event streams, on a real server (a stream is only read by a real client):
    arbitrary thread and run ids, `after` and `Last-Event-ID` values either open a stream
    (200, text/event-stream) or are refused with a JSON error, never a 5xx, writing nothing."""
    asyncio.run(fuzz_streams(tmp_path))


async def fuzz_streams(tmp_path: Path) -> None:
    from tests.test_serve import Server

    async with SQLiteEventStore(tmp_path / "streams.db") as store:
        runtime = build(store)
        async with (
            Server(create_app(runtime)) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as client,
        ):
            done = await client.post(
                "/log/threads/t/runs/wait", json={"assistant_id": "chat", "input": "hi"}
            )
            run_id = done.json()["run"]["run_id"]
            calls: list[tuple[str, dict[str, str], dict[str, str]]] = []

            @settings(
                max_examples=60,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(
                segments | st.just("t"),
                segments | st.just(run_id),
                st.booleans(),
                st.dictionaries(st.just("after"), st.text(max_size=6), max_size=1),
                st.one_of(st.none(), st.text(max_size=8), st.integers(-5, 10**20).map(str)),
            )
            def draw(
                thread: str, run: str, of_run: bool, query: dict[str, str], last: str | None
            ) -> None:
                path = (
                    f"/log/threads/{thread}/runs/{run}/stream"
                    if of_run
                    else f"/log/threads/{thread}/stream"
                )
                usable = last is not None and last.isascii() and last.isprintable()
                headers = {"Last-Event-ID": last} if usable and last is not None else {}
                calls.append((path, query, headers))

            draw()
            for path, query, headers in calls:
                before = await last_position(store)
                async with client.stream("GET", path, params=query, headers=headers) as response:
                    where = f"{path} {query} {headers} -> {response.status_code}"
                    assert response.status_code < 500, where
                    if response.status_code == 200:
                        assert response.headers["content-type"].startswith("text/event-stream")
                        continue  # it is open: leaving closes it
                    body = json.loads(await response.aread())
                    assert body["error"]["code"] and "Traceback" not in json.dumps(body), where
                assert await last_position(store) == before, f"a refusal wrote: {where}"
