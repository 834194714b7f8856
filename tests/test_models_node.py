"""`ModelNode` with the real openai and anthropic clients over real HTTP: a local server
speaks the providers' wire formats (JSON, SSE, errors) from recorded responses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from pydantic import BaseModel

from agentlog.actors import GraphError, NodeError
from agentlog.actors.models import (
    LoggedAnswers,
    ModelEmptyRequestError,
    ModelNode,
    ModelRefusedError,
    ModelRetry,
    ModelSpecError,
    ModelTruncatedError,
    ModelUnavailableError,
    request_hash,
)
from agentlog.events import MemoryEventStore, ModelCalled
from agentlog.projections import AgentState, Message
from tests.helpers import agent_with_tools
from tests.workers.fake_provider import FakeProvider, Reply, fixture_json

CFG = {"thread_id": "t1"}
QUESTION = "My order A-1042 arrived damaged. Can I get my money back?"


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by its id.

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "delivered damaged"}


@pytest.fixture
async def server() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as running:
        yield running


class Sleeps:
    """A `ModelRetry.sleep` that records the delays instead of waiting them out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def openai_client(server: FakeProvider) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.openai_url, api_key="sk-test")


def anthropic_client(server: FakeProvider) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="sk-ant-test")


def node(client: Any, sleeps: Sleeps | None = None, **kwargs: Any) -> ModelNode:
    retry = ModelRetry(attempts=3, base_delay=0.01, jitter=0.0, sleep=sleeps or Sleeps())
    kwargs.setdefault("tools", [lookup_order])
    return ModelNode(client, model="test-model", retry=retry, **kwargs)


def app(model: ModelNode, store: MemoryEventStore | None = None) -> Any:
    return agent_with_tools(model, [lookup_order]).compile(checkpointer=store or MemoryEventStore())


async def model_calls(graph: Any) -> list[ModelCalled]:
    records = [r async for r in graph.store.read("t1")]
    return [r.event for r in records if isinstance(r.event, ModelCalled)]


async def appended(graph: Any) -> list[dict[str, Any]]:
    return [r.event.message async for r in graph.store.read("t1") if r.kind == "message_appended"]


@pytest.mark.parametrize("provider", ["chat", "responses", "anthropic"])
async def test_a_tool_loop_against_each_api(server: FakeProvider, provider: str) -> None:
    fixtures = {
        "chat": ("chat_tool_call", "chat_text"),
        "responses": ("responses_tool_call", "responses_text"),
        "anthropic": ("anthropic_tool_use", "anthropic_text"),
    }[provider]
    server.script(*(Reply(fixture=f) for f in fixtures))
    client = anthropic_client(server) if provider == "anthropic" else openai_client(server)
    api = "responses" if provider == "responses" else "chat"
    graph = app(node(client, system_prompt="You are a support agent.", api=api, temperature=0))
    out = await graph.ainvoke({"messages": [QUESTION]}, CFG)
    assert out["messages"][-1].text() == "Your order A-1042 is eligible for a refund of 89.90."
    calls = await model_calls(graph)
    assert [(c.attempt, c.status, c.streamed) for c in calls] == [(1, "completed", False)] * 2
    assert calls[0].finish_reason in ("tool_calls", "tool_use")
    assert calls[0].usage is not None and calls[0].usage["total_tokens"] > 0
    sent = {"temperature": 0, **({"max_tokens": 1024} if provider == "anthropic" else {})}
    assert calls[0].params == sent and calls[0].request_hash != calls[1].request_hash
    messages = [m for m in await appended(graph) if m["role"] == "assistant"]
    assert [m["message_id"] for m in messages] == [c.message_id for c in calls]
    # what the provider was sent: the system prompt, the tools, and the tool's result
    first, second = (seen.body for seen in server.requests)
    assert first["temperature"] == 0 and len(first["tools"]) == 1
    assert "You are a support agent." in str(first) and "delivered damaged" in str(second)
    assert out["token_usage"]["total_tokens"] > 0


@pytest.mark.parametrize("provider", ["chat", "responses", "anthropic"])
async def test_astream_gets_deltas_and_the_log_one_message(
    server: FakeProvider, provider: str
) -> None:
    client = anthropic_client(server) if provider == "anthropic" else openai_client(server)
    api = "responses" if provider == "responses" else "chat"
    graph = app(node(client, api=api))
    chunks = [c async for c in graph.astream({"messages": [QUESTION]}, CFG)]
    deltas = [c.data for c in chunks if c.data and c.data.get("kind") == "text"]
    assert len(deltas) >= 3 and all(d["node"] == "agent" for d in deltas)
    said = "".join(d["delta"] for d in deltas)
    assert said == "Your order A-1042 is eligible for a refund of 89.90."
    assert server.requests[0].body["stream"] is True
    answers = [m for m in await appended(graph) if m["role"] == "assistant"]
    assert len(answers) == 1 and answers[0]["content"][-1]["text"] == said
    [call] = await model_calls(graph)
    assert (
        call.streamed and call.status == "completed" and call.message_id == answers[0]["message_id"]
    )


async def test_a_rate_limit_is_retried_after_the_time_the_provider_asked(
    server: FakeProvider,
) -> None:
    server.script(Reply(status=429, headers={"retry-after": "0.25"}), Reply(status=500))
    sleeps = Sleeps()
    graph = app(node(openai_client(server), sleeps))
    out = await graph.ainvoke({"messages": [QUESTION]}, CFG)
    assert out["messages"][-1].text().startswith("Your order")
    calls = await model_calls(graph)
    assert [(c.attempt, c.status, c.error_type) for c in calls] == [
        (1, "failed", "RateLimitError"),
        (2, "failed", "InternalServerError"),
        (3, "completed", None),
    ]
    assert "429" in (calls[0].error or "") and calls[0].message_id is None
    assert sleeps.delays == [0.25, 0.02]  # the provider's wait, then backoff from 0.01
    assert len({c.request_hash for c in calls}) == 1


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (Reply(body="{not json"), "JSONDecodeError"),
        (Reply(delay=2.0), "APITimeoutError"),
        (Reply(status=503, body={"error": {"message": "overloaded"}}), "InternalServerError"),
    ],
)
async def test_transient_failures_are_retried(
    server: FakeProvider, reply: Reply, error_type: str
) -> None:
    server.script(reply)
    graph = app(node(openai_client(server), timeout=0.5))
    await graph.ainvoke({"messages": [QUESTION]}, CFG)
    calls = await model_calls(graph)
    assert [(c.status, c.error_type) for c in calls] == [
        ("failed", error_type),
        ("completed", None),
    ]


@pytest.mark.parametrize("provider", ["chat", "anthropic"])
async def test_a_stream_cut_mid_way_is_retried_and_the_log_holds_one_message(
    server: FakeProvider, provider: str
) -> None:
    server.script(Reply(cut_after=4))
    client = anthropic_client(server) if provider == "anthropic" else openai_client(server)
    graph = app(node(client))
    chunks = [c async for c in graph.astream({"messages": [QUESTION]}, CFG)]
    retries = [c.data for c in chunks if c.data and c.data.get("kind") == "retry"]
    assert len(retries) == 1 and retries[0]["attempt"] == 1
    calls = await model_calls(graph)
    assert [(c.attempt, c.status, c.streamed) for c in calls] == [
        (1, "failed", True),
        (2, "completed", True),
    ]
    answers = [m for m in await appended(graph) if m["role"] == "assistant"]
    assert len(answers) == 1 and answers[0]["content"][-1]["text"].endswith("89.90.")


@pytest.mark.parametrize(
    ("provider", "status", "hint"),
    [
        ("chat", 401, "check the API key"),
        ("chat", 404, "check the model name"),
        ("anthropic", 400, "check the request's params"),
    ],
)
async def test_a_refused_request_fails_the_run_at_once_naming_the_cause(
    server: FakeProvider, provider: str, status: int, hint: str
) -> None:
    server.script(Reply(status=status))
    client = anthropic_client(server) if provider == "anthropic" else openai_client(server)
    graph = app(node(client))
    with pytest.raises(NodeError) as caught:
        await graph.ainvoke({"messages": [QUESTION]}, CFG)
    refused = caught.value.__cause__
    assert isinstance(refused, ModelRefusedError) and refused.status == status
    assert hint in str(refused) and f"HTTP {status}" in str(refused)
    [call] = await model_calls(graph)
    assert call.status == "failed" and str(status) in (call.error or "")
    kinds = [r.kind async for r in graph.store.read("t1")]
    assert kinds[-2:] == ["model_called", "run_failed"] and len(server.requests) == 1


async def test_attempts_run_out_with_a_typed_error_and_a_retry_succeeds(
    server: FakeProvider,
) -> None:
    server.script(*[Reply(status=500)] * 3)
    graph = app(node(openai_client(server)))
    with pytest.raises(NodeError) as caught:
        await graph.ainvoke({"messages": [QUESTION]}, CFG)
    assert isinstance(caught.value.__cause__, ModelUnavailableError)
    assert "failed 3 attempt(s)" in str(caught.value.__cause__)
    assert "give the node more attempts" in str(caught.value.__cause__)
    out = await graph.ainvoke(None, CFG)  # invoking again retries the node
    assert out["messages"][-1].text().startswith("Your order")
    statuses = [c.status for c in await model_calls(graph)]
    assert statuses == ["failed"] * 3 + ["completed"]


async def test_a_request_seen_before_is_answered_from_the_log(server: FakeProvider) -> None:
    store = MemoryEventStore()
    graph = app(node(openai_client(server)), store)
    first = await graph.ainvoke({"messages": [Message.text_message(QUESTION, message_id="q")]}, CFG)
    replaying = app(node(openai_client(server), replay_from=LoggedAnswers(store)), store)
    again = {"thread_id": "t2"}
    out = await replaying.ainvoke(
        {"messages": [Message.text_message(QUESTION, message_id="q")]}, again
    )
    assert len(server.requests) == 1  # the second run never reached the provider
    assert out["messages"][-1].content == first["messages"][-1].content
    assert out["messages"][-1].message_id != first["messages"][-1].message_id
    records = [r.event async for r in store.read("t2")]
    [call] = [e for e in records if isinstance(e, ModelCalled)]
    assert call.params["answered_from_log"] is True and call.latency_ms == 0.0
    other = {"thread_id": "t3"}
    await replaying.ainvoke({"messages": ["something else"]}, other)
    assert len(server.requests) == 2  # a new request goes to the provider


def test_a_sync_client_or_a_bad_spec_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GraphError, match="pass the async client"):
        ModelNode(openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9"), model="m")
    with pytest.raises(ModelSpecError, match="openai:MODEL or anthropic:MODEL"):
        ModelNode.from_spec("gpt-4o")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelSpecError, match="set OPENAI_API_KEY"):
        ModelNode.from_spec("openai:gpt-4o-mini")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    made = ModelNode.from_spec("anthropic:claude-x", system_prompt="hi")
    assert (made.provider, made.model, made.system_prompt) == ("anthropic", "claude-x", "hi")


async def test_the_summary_and_system_prompt_lead_the_request(server: FakeProvider) -> None:
    model = node(anthropic_client(server), system_prompt="Be brief.")
    state = AgentState(context=[Message.text_message("hi")], context_summary="they asked about A-1")
    request = model.request(state)
    assert (
        request["system"]
        == "Be brief.\n\nSummary of the earlier conversation: they asked about A-1"
    )
    assert request["max_tokens"] == 1024 and request["messages"][0]["role"] == "user"


async def test_model_called_records_the_params_as_sent(server: FakeProvider) -> None:
    """Anthropic requires max_tokens: the default the node sends is in the record too."""
    graph = app(node(anthropic_client(server)))
    await graph.ainvoke({"messages": [QUESTION]}, CFG)
    [call] = await model_calls(graph)
    assert (
        call.params == {"max_tokens": 1024} == {"max_tokens": server.requests[0].body["max_tokens"]}
    )
    chosen = node(anthropic_client(server), max_tokens=64, temperature=0.5)
    assert chosen.params == {"max_tokens": 64, "temperature": 0.5}
    assert chosen.request(AgentState())["max_tokens"] == 64
    assert node(openai_client(server)).params == {}


def test_a_spec_is_read_leniently_and_a_bad_one_says_what_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    made = ModelNode.from_spec(" OpenAI: gpt-4o-mini ")
    assert (made.provider, made.model) == ("openai", "gpt-4o-mini")
    for spec in ("google:gemini-2.0", "openai:", ":gpt-4o"):
        with pytest.raises(ModelSpecError, match="OPENAI_BASE_URL") as caught:
            ModelNode.from_spec(spec)
        assert repr(spec) in str(caught.value)


@pytest.mark.parametrize(
    ("provider", "system_prompt", "sent"),
    [
        ("anthropic", "Be brief.", False),  # Anthropic takes no request of a system prompt alone
        ("chat", None, False),
        ("chat", "Be brief.", True),  # a chat request of the system message alone is valid
        ("responses", None, False),
    ],
)
async def test_an_empty_context_is_not_sent_when_the_provider_would_refuse_it(
    server: FakeProvider, provider: str, system_prompt: str | None, sent: bool
) -> None:
    client = anthropic_client(server) if provider == "anthropic" else openai_client(server)
    api = "responses" if provider == "responses" else "chat"
    graph = app(node(client, api=api, system_prompt=system_prompt))
    if sent:
        out = await graph.ainvoke({"messages": []}, CFG)
        assert out["messages"][-1].role == "assistant" and len(server.requests) == 1
        return
    with pytest.raises(NodeError) as caught:
        await graph.ainvoke({"messages": []}, CFG)
    empty = caught.value.__cause__
    assert isinstance(empty, ModelEmptyRequestError)
    assert "'agent'" in str(empty) and "start the run with a user message" in str(empty)
    assert server.requests == [] and await model_calls(graph) == []


async def test_extra_headers_are_sent_but_the_log_keeps_only_their_names(
    server: FakeProvider,
) -> None:
    secret = "Bearer do-not-log-me"
    plain, headed = (
        node(openai_client(server)),
        node(openai_client(server), extra_headers={"X-Gateway-Key": secret}),
    )
    graph = app(headed)
    await graph.ainvoke({"messages": [QUESTION]}, CFG)
    assert server.requests[0].headers["x-gateway-key"] == secret
    assert "extra_headers" not in server.requests[0].body
    [call] = await model_calls(graph)
    assert call.params == {"extra_headers": ["X-Gateway-Key"]}
    assert secret not in str([r async for r in graph.store.read("t1")])
    state = AgentState(context=[Message.text_message(QUESTION)])
    assert request_hash("openai", plain.request(state)) == request_hash(
        "openai", headed.request(state)
    )


class Answer(BaseModel):
    refund: bool


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"messages": []}, "sends the state's context"),
        ({"system": "x"}, "pass system_prompt="),
        ({"max_retries": 3}, "retry=ModelRetry(attempts=N)"),
        ({"stream_options": {}}, "pass stream=True or False"),
        ({"response_format": Answer}, "not a pydantic class"),
    ],
)
def test_a_keyword_that_is_not_a_provider_param_is_refused_saying_what_to_pass(
    server: FakeProvider, params: dict[str, Any], says: str
) -> None:
    with pytest.raises(GraphError, match="ModelNode") as caught:
        node(openai_client(server), **params)
    assert says in str(caught.value)


async def test_a_429_for_a_used_up_quota_is_refused_at_once(server: FakeProvider) -> None:
    """OpenAI answers 429 both for a rate limit and for an account out of credit: only the
    first passes with time."""
    quota = {"message": "You exceeded your current quota.", "type": "insufficient_quota"}
    server.script(Reply(status=429, body={"error": {**quota, "code": "insufficient_quota"}}))
    graph = app(node(openai_client(server)))
    with pytest.raises(NodeError) as caught:
        await graph.ainvoke({"messages": [QUESTION]}, CFG)
    refused = caught.value.__cause__
    assert isinstance(refused, ModelRefusedError) and refused.status == 429
    assert "quota is used up" in str(refused) and "exceeded your current quota" in str(refused)
    assert len(server.requests) == 1 and len(await model_calls(graph)) == 1


async def test_a_tool_call_cut_at_the_token_limit_fails_at_once_saying_so(
    server: FakeProvider,
) -> None:
    cut = fixture_json("chat_tool_call")
    cut["choices"][0]["finish_reason"] = "length"
    cut["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"order_id": "A'
    server.script(Reply(body=cut))
    graph = app(node(openai_client(server), max_tokens=8))
    with pytest.raises(NodeError) as caught:
        await graph.ainvoke({"messages": [QUESTION]}, CFG)
    assert isinstance(caught.value.__cause__, ModelTruncatedError)
    assert "raise max_tokens" in str(caught.value.__cause__)
    [call] = await model_calls(graph)  # one attempt: the same limit would cut it again
    assert (call.status, call.error_type) == ("failed", "ModelTruncatedError")


async def test_an_answer_from_the_log_reaches_astream_consumers_as_deltas(
    server: FakeProvider,
) -> None:
    store = MemoryEventStore()
    server.script(Reply(fixture="anthropic_tool_use"))
    first = app(node(anthropic_client(server)), store)
    await first.ainvoke({"messages": [Message.text_message(QUESTION, message_id="q")]}, CFG)
    replaying = app(node(anthropic_client(server), replay_from=LoggedAnswers(store)), store)
    start = {"messages": [Message.text_message(QUESTION, message_id="q")]}
    chunks = [c async for c in replaying.astream(start, {"thread_id": "t2"})]
    deltas = [c.data for c in chunks if c.data and c.data.get("answered_from_log")]
    assert [d["kind"] for d in deltas] == ["reasoning", "text", "tool_call", "text"]
    assert deltas[1]["delta"] == "Let me look up order A-1042."
    call = (deltas[2]["name"], json.loads(deltas[2]["delta"]))
    assert call == ("lookup_order", {"order_id": "A-1042"})
    assert deltas[3]["delta"] == "Your order A-1042 is eligible for a refund of 89.90."
    assert len(server.requests) == 2  # both answers of the second run came from the log


async def test_a_large_anthropic_max_tokens_streams_even_without_a_consumer(
    server: FakeProvider,
) -> None:
    """The Anthropic SDK refuses an unstreamed call it expects to last over ten minutes."""
    graph = app(node(anthropic_client(server), max_tokens=32_000))
    out = await graph.ainvoke({"messages": [QUESTION]}, CFG)
    assert out["messages"][-1].text().endswith("89.90.")
    assert server.requests[0].body["stream"] is True
    [call] = await model_calls(graph)
    assert call.streamed and call.status == "completed"
    await app(node(anthropic_client(server), max_tokens=4096)).ainvoke(
        {"messages": [QUESTION]}, CFG
    )
    assert "stream" not in server.requests[1].body  # a usual limit is a plain call
    opus = ModelNode(anthropic_client(server), model="claude-opus-4-0", max_tokens=10_000)
    graph = app(opus)
    await graph.ainvoke({"messages": [QUESTION]}, {"thread_id": "opus"})
    assert server.requests[2].body["stream"] is True  # over the SDK's limit for that model


async def test_from_spec_takes_the_servers_url_and_key_and_the_node_refuses_them(
    server: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user of a local OpenAI-compatible server writes first; the key never reaches
    the log or the request body."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    made = ModelNode.from_spec("openai:llama3", base_url=server.openai_url, api_key="sk-local")
    graph = app(made)
    await graph.ainvoke({"messages": [QUESTION]}, CFG)
    seen = server.requests[0]
    assert seen.headers["authorization"] == "Bearer sk-local" and seen.body["model"] == "llama3"
    assert "sk-local" not in str([r async for r in graph.store.read("t1")]) + str(seen.body)
    for name in ("api_key", "base_url"):
        with pytest.raises(GraphError, match="give it to the client"):
            node(openai_client(server), **{name: "x"})


def test_two_tools_with_one_name_are_refused_before_any_request() -> None:
    from agentlog.actors.models._common import function_schemas

    def lookup(order_id: str) -> str:
        """Look an order up."""
        return order_id

    def other(order_id: str) -> str:
        """Another."""
        return order_id

    other.__name__ = "lookup"
    with pytest.raises(Exception, match="lookup"):
        function_schemas([lookup, other])
