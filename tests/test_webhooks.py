"""Webhook entry points: the signature checks as pure functions (known vectors and
properties), and `receive` served by a small Starlette app over a real runtime on a real
SQLite file: signed, unsigned, tampered, stale, replayed, oversized and malformed deliveries."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentlog.actors.http.webhooks import (
    MAX_BODY,
    MAX_DEPTH,
    WebhookRejected,
    parse_body,
    receive,
    secret_key,
    sign_github,
    sign_standard,
    unsigned_delivery_id,
    verify_custom,
    verify_delivery,
    verify_github,
    verify_standard,
)
from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.actors.testing import FakeClock
from agentlog.events import SQLiteEventStore
from agentlog.events.errors import InvalidArgumentError
from agentlog.events.follow import last_position
from agentlog.events.kinds import RunStarted, TriggerAccepted
from agentlog.projections import AgentState, Message
from tests.helpers import counted_digest_compares, line

NOW = 1_700_000_000
ROTATING = ("whsec_" + base64.b64encode(b"the old key, still valid").decode(), "new plain secret")
GITHUB = ("It's a Secret to Everybody", "the next one")

# ---- strategies ----------------------------------------------------------------------------

plain_secrets = st.text(min_size=1, max_size=40).filter(lambda s: not s.startswith("whsec_"))
whsec_secrets = st.binary(min_size=1, max_size=40).map(
    lambda b: "whsec_" + base64.b64encode(b).decode()
)
secrets = st.one_of(plain_secrets, whsec_secrets)
secret_pairs = st.lists(secrets, min_size=2, max_size=2, unique_by=secret_key)
delivery_ids = st.from_regex(r"[\x21-\x7e]{1,60}", fullmatch=True)
bodies = st.binary(min_size=1, max_size=300)


def standard_headers(
    secret: str, delivery_id: str, body: bytes, timestamp: int = NOW
) -> dict[str, str]:
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign_standard(secret, delivery_id, timestamp, body),
    }


def rejected(call: Callable[[], object]) -> WebhookRejected:
    with pytest.raises(WebhookRejected) as info:
        call()
    return info.value


def flip_char(text: str, index: int, new: str) -> str:
    return text[:index] + new + text[index + 1 :]


# ---- secrets and known vectors -----------------------------------------------------------


def test_secret_forms() -> None:
    assert secret_key("whsec_" + base64.b64encode(b"\x00key").decode()) == b"\x00key"
    assert secret_key("plain secret") == b"plain secret"
    with pytest.raises(InvalidArgumentError) as info:
        secret_key("whsec_not base64!!")
    assert "not base64" not in str(info.value)  # the secret is never echoed


def test_standard_webhooks_reference_vector() -> None:
    """The example of the Standard Webhooks reference libraries."""
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    signature = sign_standard(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    headers = {
        "Webhook-Id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "Webhook-Timestamp": "1614265330",
        "Webhook-Signature": "v1a,ignored " + signature,
    }
    assert verify_standard(headers, body, [secret], now=1614265330) == (
        "msg_p5jXN8AQM9LWM0D4loKWxJek"
    )


def test_github_reference_vector() -> None:
    """The example of GitHub's "validating webhook deliveries" documentation."""
    signature = sign_github("It's a Secret to Everybody", b"Hello, World!")
    assert signature == ("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
    headers = {"X-Hub-Signature-256": signature, "X-GitHub-Delivery": "d-1"}
    assert verify_github(headers, b"Hello, World!", GITHUB[::-1]) == "d-1"


def test_standard_refusals_name_what_is_wrong() -> None:
    body = b"{}"
    good = standard_headers(ROTATING[1], "msg_1", body)
    cases: list[tuple[dict[str, str], int, str]] = [
        ({k: v for k, v in good.items() if k != "webhook-signature"}, 401, "missing_signature"),
        ({k: v for k, v in good.items() if k != "webhook-id"}, 400, "missing_delivery_id"),
        ({**good, "webhook-id": "has space"}, 400, "bad_delivery_id"),
        ({**good, "webhook-timestamp": "17e8"}, 400, "bad_timestamp"),
        ({**good, "webhook-timestamp": str(NOW - 301)}, 401, "timestamp_out_of_tolerance"),
        ({**good, "webhook-signature": "v2,abc"}, 401, "bad_signature"),
        ({**good, "webhook-signature": "v1," + "A" * 44}, 401, "bad_signature"),
    ]
    for headers, status, code in cases:
        exc = rejected(lambda h=headers: verify_standard(h, body, ROTATING, now=NOW))
        assert (exc.status, exc.code) == (status, code)
        for secret in ROTATING:
            assert secret not in str(exc) and secret[6:] not in str(exc)


def test_signatures_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every (expected, given) pair goes through `hmac.compare_digest`, with no early exit,
    whichever secret or signature matches (or none does)."""
    compared = counted_digest_compares(monkeypatch)
    body = b"{}"
    first = standard_headers(ROTATING[0], "msg_1", body)
    both = f"{first['webhook-signature']} {sign_standard(ROTATING[1], 'msg_1', NOW, body)}"
    for signature, valid in ((first["webhook-signature"], True), (both, True),
                             ("v1,AAAA v1,BBBB", False)):  # fmt: skip
        compared.clear()
        headers = {**first, "webhook-signature": signature}
        if valid:
            verify_standard(headers, body, ROTATING, now=NOW)
        else:
            with pytest.raises(WebhookRejected):
                verify_standard(headers, body, ROTATING, now=NOW)
        assert len(compared) == 2 * len(signature.split(" ")), signature
    for secret in (GITHUB[0], "wrong"):
        compared.clear()
        headers = {"X-Hub-Signature-256": sign_github(secret, body), "X-GitHub-Delivery": "d"}
        if secret == "wrong":
            with pytest.raises(WebhookRejected):
                verify_github(headers, body, GITHUB)
        else:
            assert verify_github(headers, body, GITHUB) == "d"
        assert len(compared) == len(GITHUB)


def test_github_refusals() -> None:
    body = b'{"zen": "Keep it logically awesome."}'
    signature = sign_github(GITHUB[0], body)
    missing = rejected(lambda: verify_github({"X-GitHub-Delivery": "d"}, body, GITHUB))
    assert (missing.status, missing.code) == (401, "missing_signature")
    no_id = rejected(lambda: verify_github({"X-Hub-Signature-256": signature}, body, GITHUB))
    assert (no_id.status, no_id.code) == (400, "missing_delivery_id")
    whsec = "whsec_" + base64.b64encode(b"k").decode()  # used as it is, not decoded
    assert sign_github(whsec, body) != sign_github("k", body)
    upper = {"X-Hub-Signature-256": signature.upper(), "X-GitHub-Delivery": "d"}
    assert rejected(lambda: verify_github(upper, body, GITHUB)).code == "bad_signature"


def test_custom_verifier_and_its_delivery_id() -> None:
    def verify(headers: Any, body: bytes, secrets: Sequence[str]) -> bool:
        return headers.get("x-token") in secrets

    ok = {"x-token": "t", "X-Request-Id": "r-1"}
    assert verify_custom(ok, b"", ["t"], verify) == "r-1"
    assert verify_custom({**ok, "X-GitHub-Delivery": "g-1"}, b"", ["t"], verify) == "g-1"
    assert (
        verify_custom({**ok, "webhook-id": "w-1", "X-GitHub-Delivery": "g"}, b"", ["t"], verify)
        == "w-1"
    )
    no_id = rejected(lambda: verify_custom({"x-token": "t"}, b"", ["t"], verify))
    assert (no_id.status, no_id.code) == (400, "missing_delivery_id")
    assert rejected(lambda: verify_custom({"x-token": "x"}, b"", ["t"], verify)).status == 401

    def raises(headers: Any, body: bytes, secrets: Sequence[str]) -> bool:
        raise KeyError("x-token")

    assert "KeyError" in str(rejected(lambda: verify_custom(ok, b"", ["t"], raises)))

    async def coroutine(headers: Any, body: bytes, secrets: Sequence[str]) -> bool:
        return True

    exc = rejected(lambda: verify_custom(ok, b"", ["t"], coroutine))  # type: ignore[arg-type]
    assert "coroutine" in str(exc)
    truthy = rejected(lambda: verify_custom(ok, b"", ["t"], lambda h, b, s: 1))  # type: ignore[arg-type,return-value]
    assert truthy.status == 401


def test_unsigned_delivery_id() -> None:
    assert unsigned_delivery_id({"X-Request-Id": "r"}, b"x") == "r"
    by_body = unsigned_delivery_id({}, b"same")
    assert by_body == unsigned_delivery_id({}, b"same") != unsigned_delivery_id({}, b"other")
    assert by_body.startswith("sha256:")
    entry = EntryPoint(id="u", graph_id="g", trigger="webhook", path="/u", unsigned=True)
    assert verify_delivery(entry, {}, b"same", now=NOW) == by_body


def test_a_route_without_secrets_must_say_it_is_unsigned() -> None:
    from agentlog.actors.runtime import RegistrationError

    with pytest.raises(RegistrationError, match="must say unsigned=True"):
        EntryPoint(id="w", graph_id="g", trigger="webhook", path="/w").check()
    with pytest.raises(RegistrationError, match="unsigned=True with secrets"):
        EntryPoint(
            id="w", graph_id="g", trigger="webhook", path="/w", secrets=("s",), unsigned=True
        ).check()
    EntryPoint(id="w", graph_id="g", trigger="webhook", path="/w", unsigned=True).check()


def test_parse_body() -> None:
    assert parse_body(b'{"a": [1, 2.5]}', "application/json; charset=utf-8") == (
        '{"a": [1, 2.5]}',
        {"a": [1, 2.5]},
    )
    assert parse_body(b'{"a": 1}', "application/cloudevents+json")[1] == {"a": 1}
    assert parse_body("héllo".encode(), "text/plain") == ("héllo", "héllo")
    assert parse_body(b"{not json", None) == ("{not json", "{not json")
    for body, content_type, code in [
        (b"{not json", "application/json", "malformed_json"),
        (b"", "application/json", "malformed_json"),
        (b"[NaN]", "application/json", "malformed_json"),
        (b"[1e400]", "application/json", "malformed_json"),
        (b"\xff\xfe", "text/plain", "bad_encoding"),
        (b'{"a": 1}', "application/json; charset=latin-1", "unsupported_charset"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "too_deep"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "application/json", "too_deep"),
        (
            b'{"a": ' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1),
            "application/json",
            "too_deep",
        ),
        (b"[18446744073709551616]", "application/json", "unrecordable_body"),
        (b'["\\ud800"]', "application/json", "unrecordable_body"),
    ]:
        exc = rejected(lambda b=body, c=content_type: parse_body(b, c))
        assert (exc.status, exc.code) == (400, code), body[:20]


# ---- properties ----------------------------------------------------------------------------


@given(secret_pairs, st.integers(0, 1), delivery_ids, bodies)
def test_either_rotation_secret_verifies(
    pair: list[str], which: int, delivery_id: str, body: bytes
) -> None:
    headers = standard_headers(pair[which], delivery_id, body)
    assert verify_standard(headers, body, pair, now=NOW) == delivery_id
    both = f"{sign_standard(pair[0], delivery_id, NOW, body)} {headers['webhook-signature']}"
    assert verify_standard({**headers, "webhook-signature": both}, body, pair, now=NOW)
    other = rejected(lambda: verify_standard(headers, body, [pair[1 - which]], now=NOW))
    assert (other.status, other.code) == (401, "bad_signature")


@given(secrets, delivery_ids, bodies, st.data())
def test_any_flipped_byte_fails(secret: str, delivery_id: str, body: bytes, data: Any) -> None:
    headers = standard_headers(secret, delivery_id, body)
    where = data.draw(
        st.sampled_from(["body", "webhook-id", "webhook-timestamp", "webhook-signature"])
    )
    if where == "body":
        i = data.draw(st.integers(0, len(body) - 1))
        mask = data.draw(st.integers(1, 255))
        body = body[:i] + bytes([body[i] ^ mask]) + body[i + 1 :]
    else:
        value = headers[where]
        i = data.draw(st.integers(0, len(value) - 1))
        new = data.draw(st.characters().filter(lambda c: c != value[i]))
        headers = {**headers, where: flip_char(value, i, new)}
    exc = rejected(lambda: verify_standard(headers, body, [secret], now=NOW))
    assert exc.status in (400, 401)


@given(secrets, delivery_ids, bodies, st.integers(1, 10**6), st.booleans())
def test_old_or_future_timestamps_fail(
    secret: str, delivery_id: str, body: bytes, beyond: int, future: bool
) -> None:
    sent = NOW + 300 + beyond if future else NOW - 300 - beyond
    headers = standard_headers(secret, delivery_id, body, timestamp=sent)
    exc = rejected(lambda: verify_standard(headers, body, [secret], now=NOW, tolerance_s=300))
    assert (exc.status, exc.code) == (401, "timestamp_out_of_tolerance")
    assert verify_standard(headers, body, [secret], now=sent, tolerance_s=300) == delivery_id
    edge = standard_headers(secret, delivery_id, body, timestamp=NOW + (300 if future else -300))
    assert verify_standard(edge, body, [secret], now=NOW, tolerance_s=300) == delivery_id


@given(secret_pairs, st.integers(0, 1), bodies, delivery_ids, st.data())
def test_github_signature_round_trips(
    pair: list[str], which: int, body: bytes, delivery_id: str, data: Any
) -> None:
    headers = {
        "X-Hub-Signature-256": sign_github(pair[which], body),
        "X-GitHub-Delivery": delivery_id,
    }
    assert verify_github(headers, body, pair) == delivery_id
    i = data.draw(st.integers(0, len(body) - 1))
    tampered = body[:i] + bytes([body[i] ^ data.draw(st.integers(1, 255))]) + body[i + 1 :]
    assert rejected(lambda: verify_github(headers, tampered, pair)).status == 401
    value = headers["X-Hub-Signature-256"]
    j = data.draw(st.integers(0, len(value) - 1))
    new = data.draw(st.characters().filter(lambda c: c != value[j]))
    forged = {**headers, "X-Hub-Signature-256": flip_char(value, j, new)}
    assert rejected(lambda: verify_github(forged, body, pair)).status == 401


# ---- receive, over HTTP, on a real runtime -----------------------------------------------------


def seen(state: AgentState) -> list[Message]:
    """The entry node: it answers with what the delivery's metadata told it."""
    hook = state.context[0].metadata["webhook"]
    return [Message.text_message(json.dumps(hook, sort_keys=True), role="assistant")]


def custom_verify(headers: Any, body: bytes, secrets: Sequence[str]) -> bool:
    return headers.get("x-shared-token") in secrets


ENTRIES = [
    EntryPoint(
        id="zendesk", graph_id="hooks", trigger="webhook", path="/hooks/zendesk", secrets=ROTATING
    ),
    EntryPoint(
        id="github",
        graph_id="hooks",
        trigger="webhook",
        path="/hooks/github",
        secrets=GITHUB,
        scheme="github",
        methods=("POST", "PUT"),
    ),
    EntryPoint(id="local", graph_id="hooks", trigger="webhook", path="/hooks/local", unsigned=True),
    EntryPoint(
        id="custom",
        graph_id="hooks",
        trigger="webhook",
        path="/hooks/custom",
        secrets=("tok",),
        scheme=custom_verify,
    ),
]


class Server:
    """A runtime with the webhook entry points above, served by a Starlette app of its own."""

    def __init__(self, db: Path, clock: FakeClock, max_body: int = MAX_BODY) -> None:
        self.db, self.clock, self.max_body = db, clock, max_body

    async def __aenter__(self) -> Server:
        self.store = await SQLiteEventStore(self.db).__aenter__()
        self.runtime = AgentRuntime(self.store, clock=self.clock)
        self.runtime.add_graph("hooks", line(("agent", seen)).compile(self.store))
        routes = []
        for entry in ENTRIES:
            self.runtime.register_entry_point(entry)
            routes.append(
                Route(entry.path, self._endpoint(entry), methods=["GET", "POST", "PUT", "DELETE"])
            )
        await self.runtime.start()
        app = Starlette(routes=routes)
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://hooks.test"
        )
        return self

    def _endpoint(self, entry: EntryPoint) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return await receive(self.runtime, entry, request, max_body=self.max_body)

        return endpoint

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self.runtime.stop()
        await self.store.__aexit__(None, None, None)

    async def head(self) -> tuple[int, int]:
        """The runtime thread's last seq and the log's last position: nothing written keeps both."""
        return await self.store.last_seq("__runtime__"), await last_position(self.store)

    async def accepted(self) -> list[TriggerAccepted]:
        return [
            r.event
            async for r in self.store.read("__runtime__")
            if isinstance(r.event, TriggerAccepted)
        ]

    async def post_standard(
        self, body: bytes, delivery_id: str, secret: str = ROTATING[0], **kw: Any
    ) -> httpx.Response:
        headers = standard_headers(
            secret, delivery_id, body, timestamp=int(self.clock.now) + kw.pop("skew", 0)
        )
        headers.update(kw.pop("headers", {}))
        return await self.client.post(
            "/hooks/zendesk", content=body, headers={"content-type": "application/json", **headers}
        )


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with Server(tmp_path / "hooks.db", FakeClock(float(NOW))) as s:
        yield s


async def test_signed_standard_deliveries_start_runs_that_see_the_body(server: Server) -> None:
    for i, secret in enumerate(ROTATING):
        body = json.dumps({"ticket": i, "subject": "printer on fire"}).encode()
        response = await server.post_standard(body, f"msg_{i}", secret)
        assert response.status_code == 202, response.text
        answer = response.json()
        assert answer["delivery_id"] == f"msg_{i}" and answer["duplicate"] is False
        result = await server.runtime.wait(answer["thread_id"], timeout=30)
        state = result["state"]
        assert result["status"] == "completed"
        first = state.context[0]
        assert first.role == "user" and first.text() == body.decode()
        hook = {"route": "/hooks/zendesk", "delivery_id": f"msg_{i}", "body": json.loads(body)}
        assert first.metadata == {"webhook": hook}
        assert json.loads(state.context[-1].text()) == hook  # what the entry node received
    accepted = await server.accepted()
    assert [(a.idempotency_key, a.by) for a in accepted] == [
        ("msg_0", "webhook:zendesk"),
        ("msg_1", "webhook:zendesk"),
    ]


async def test_signed_github_deliveries_with_either_secret(server: Server) -> None:
    for i, secret in enumerate(GITHUB):
        body = b'{"action": "opened", "number": %d}' % i
        response = await server.client.request(
            "PUT" if i else "POST",
            "/hooks/github",
            content=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Delivery": f"gh-{i}",
                "X-Hub-Signature-256": sign_github(secret, body),
            },
        )
        assert response.status_code == 202, response.text
        result = await server.runtime.wait(response.json()["thread_id"], timeout=30)
        assert result["state"].context[0].metadata["webhook"]["body"] == {
            "action": "opened",
            "number": i,
        }


async def test_unsigned_and_custom_entry_points(server: Server) -> None:
    response = await server.client.post(
        "/hooks/local", content="plain words", headers={"content-type": "text/plain"}
    )
    assert response.status_code == 202, response.text
    delivery = response.json()["delivery_id"]
    assert delivery.startswith("sha256:")
    result = await server.runtime.wait(response.json()["thread_id"], timeout=30)
    assert result["state"].context[0].metadata["webhook"] == {
        "route": "/hooks/local",
        "delivery_id": delivery,
        "body": "plain words",
    }
    again = await server.client.post("/hooks/local", content="plain words")
    assert again.json() == {**response.json(), "duplicate": True}

    ok = await server.client.post(
        "/hooks/custom", content=b"{}", headers={"x-shared-token": "tok", "x-request-id": "r-9"}
    )
    assert ok.status_code == 202 and ok.json()["delivery_id"] == "r-9"
    await server.runtime.wait(ok.json()["thread_id"], timeout=30)
    before = await server.head()
    bad = await server.client.post(
        "/hooks/custom", content=b"{}", headers={"x-shared-token": "nope", "x-request-id": "r-10"}
    )
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "bad_signature"
    assert await server.head() == before


async def test_refused_deliveries_write_nothing(server: Server) -> None:
    body = b'{"ticket": 7}'
    ok = await server.post_standard(body, "msg_ok")
    assert ok.status_code == 202
    await server.runtime.wait(ok.json()["thread_id"], timeout=30)
    before = await server.head()
    cases: list[tuple[Any, int, str]] = [
        (
            server.client.post(
                "/hooks/zendesk",
                content=body,
                headers={"webhook-id": "m", "webhook-timestamp": str(NOW)},
            ),
            401,
            "missing_signature",
        ),
        (
            server.post_standard(
                body,
                "msg_t",
                headers={
                    "webhook-signature": sign_standard(ROTATING[0], "msg_t", NOW, b'{"ticket": 8}')
                },
            ),
            401,
            "bad_signature",
        ),
        (server.post_standard(body, "msg_s", skew=-301), 401, "timestamp_out_of_tolerance"),
        (server.post_standard(body, "msg_f", skew=+301), 401, "timestamp_out_of_tolerance"),
        (
            server.post_standard(
                body, "msg_x", secret="whsec_" + base64.b64encode(b"someone else").decode()
            ),
            401,
            "bad_signature",
        ),
        (server.post_standard(b'{"ticket": ', "msg_j"), 400, "malformed_json"),
        (
            server.post_standard(b'{"big": 99999999999999999999999}', "msg_b"),
            400,
            "unrecordable_body",
        ),
        (
            server.post_standard(b"\xff", "msg_u", headers={"content-type": "text/plain"}),
            400,
            "bad_encoding",
        ),
        (server.client.get("/hooks/zendesk"), 405, "method_not_allowed"),
        (server.client.put("/hooks/zendesk", content=body), 405, "method_not_allowed"),
        (
            server.client.post(
                "/hooks/github",
                content=body,
                headers={"X-Hub-Signature-256": sign_github(GITHUB[0], body)},
            ),
            400,
            "missing_delivery_id",
        ),
        (
            server.client.post(
                "/hooks/github",
                content=body + b" ",
                headers={
                    "X-GitHub-Delivery": "g",
                    "X-Hub-Signature-256": sign_github(GITHUB[0], body),
                },
            ),
            401,
            "bad_signature",
        ),
    ]
    for call, status, code in cases:
        response = await call
        assert response.status_code == status, (code, response.text)
        assert response.json()["error"]["code"] == code
        assert response.json()["error"]["message"]
        for secret in (*ROTATING, *GITHUB):
            assert secret not in response.text
    assert (await server.client.get("/hooks/zendesk")).headers["allow"] == "POST"
    assert await server.head() == before


async def test_a_replayed_delivery_is_a_duplicate_and_runs_once(
    server: Server, tmp_path: Path
) -> None:
    body = b'{"ticket": 42}'
    first = await server.post_standard(body, "msg_42")
    again = await server.post_standard(body, "msg_42", secret=ROTATING[1])
    assert first.status_code == again.status_code == 202
    assert first.json()["duplicate"] is False
    assert again.json() == {**first.json(), "duplicate": True}
    thread = first.json()["thread_id"]
    await server.runtime.wait(thread, timeout=30)
    both = await asyncio.gather(*(server.post_standard(b'{"n": 1}', "msg_twin") for _ in range(2)))
    assert sorted(r.json()["duplicate"] for r in both) == [False, True]
    assert both[0].json()["thread_id"] == both[1].json()["thread_id"]
    await server.runtime.wait(both[0].json()["thread_id"], timeout=30)
    keys = [a.idempotency_key for a in await server.accepted()]
    assert keys.count("msg_42") == 1 and keys.count("msg_twin") == 1
    starts = [r async for r in server.store.read(thread) if isinstance(r.event, RunStarted)]
    assert len(starts) == 1


async def test_a_delivery_seen_before_a_restart_is_a_duplicate_after_it(tmp_path: Path) -> None:
    clock = FakeClock(float(NOW))
    async with Server(tmp_path / "hooks.db", clock) as first:
        answer = (await first.post_standard(b"{}", "msg_once")).json()
        await first.runtime.wait(answer["thread_id"], timeout=30)
    async with Server(tmp_path / "hooks.db", clock) as second:
        before = await second.head()
        again = await second.post_standard(b"{}", "msg_once")
        assert again.status_code == 202
        assert again.json() == {**answer, "duplicate": True}
        assert await second.head() == before


async def test_oversized_bodies_are_refused_unread(tmp_path: Path) -> None:
    async with Server(tmp_path / "hooks.db", FakeClock(float(NOW)), max_body=1024) as server:
        before = await server.head()
        declared = await server.post_standard(b"x" * 1025, "msg_big")
        assert declared.status_code == 413
        assert declared.json()["error"]["code"] == "body_too_large"
        sent = 0

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal sent
            for _ in range(1000):
                sent += 1
                yield b"y" * 100

        streamed = await server.client.post("/hooks/local", content=chunks())
        assert streamed.status_code == 413
        assert sent < 20  # the reading stopped past the limit: the body was never held whole
        assert await server.head() == before
        fits = await server.client.post("/hooks/local", content=b"z" * 1024)
        assert fits.status_code == 202


async def test_the_deepest_body_accepted_is_one_a_run_folds(server: Server) -> None:
    body = b'{"a": ' * (MAX_DEPTH - 1) + b"[]" + b"}" * (MAX_DEPTH - 1)
    response = await server.client.post(
        "/hooks/local", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 202, response.text
    result = await server.runtime.wait(response.json()["thread_id"], timeout=30)
    assert result["status"] == "completed"
    assert result["state"].context[0].metadata["webhook"]["body"] == json.loads(body)
    deeper = await server.client.post(
        "/hooks/local", content=b"[" + body + b"]", headers={"content-type": "application/json"}
    )
    assert deeper.status_code == 400 and deeper.json()["error"]["code"] == "too_deep"
