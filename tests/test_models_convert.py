"""The providers' converters: recorded responses read as messages, contexts written in each
provider's format, and round trips (context -> provider format -> messages) that keep every
block kind the provider can carry."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.actors import ToolNode
from agentlog.actors.models import (
    AnthropicStream,
    ChatStream,
    ModelResponseError,
    ModelStreamError,
    ModelTruncatedError,
    ResponsesStream,
    anthropic_tools,
    chat_tools,
    from_anthropic_message,
    from_anthropic_messages,
    from_chat_completion,
    from_response,
    responses_tools,
    to_anthropic_messages,
    to_chat_messages,
    to_responses_input,
)
from agentlog.actors.models._common import media_url
from agentlog.projections import (
    AudioBlock,
    ContentBlock,
    DataBlock,
    DocumentBlock,
    ErrorBlock,
    ImageBlock,
    MediaRef,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    VideoBlock,
    to_messages,
)
from agentlog.projections.strategies import content_blocks, text
from tests.workers.fake_provider import fixture_json, fixture_sse

# ---- recorded responses --------------------------------------------------------------------


def sse_data(name: str) -> list[Any]:
    """A recorded stream's events as the SDKs hand them over (their JSON)."""
    events = []
    for event in fixture_sse(name):
        data = next(line[6:] for line in event.splitlines() if line.startswith("data: "))
        if data != "[DONE]":
            events.append(json.loads(data))
    return events


def test_a_chat_completion_with_a_tool_call() -> None:
    answer = from_chat_completion(fixture_json("chat_tool_call"))
    message = answer.message
    assert message.role == "assistant" and answer.finish_reason == "tool_calls"
    [call] = message.tool_calls()
    assert (call.id, call.name, call.args) == (
        "call_lOSkcGIJc1Z5XbtYQ9uRLWgf", "lookup_order", {"order_id": "A-1042"},
    )  # fmt: skip
    assert message.tools_calls == [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id":"A-1042"}'},
        }
    ]
    assert message.usages is not None and message.usages.total_tokens == 99
    assert message.metadata["model"] == "gpt-4o-mini-2024-07-18"
    assert (
        message.metadata["response_id"]
        == answer.response_id
        == "chatcmpl-B9MHEyrV1q7sdxkv2hX3AiDNOb3pP"
    )


def test_a_compatible_servers_reasoning_and_images() -> None:
    message = from_chat_completion(fixture_json("chat_reasoning")).message
    kinds = [b.type for b in message.content]
    assert kinds == ["reasoning", "text", "image", "tool_call"]
    assert message.reasoning == "The user wants the weather; I should call the tool."
    image = message.content[2]
    assert isinstance(image, ImageBlock) and image.media.data_base64 == "iVBORw0KGgo="
    assert message.usages is not None and message.usages.reasoning_tokens == 14


def test_a_responses_api_answer() -> None:
    answer = from_response(fixture_json("responses_text"))
    message = answer.message
    reasoning, said = message.content
    assert isinstance(reasoning, ReasoningBlock) and "refund applies" in reasoning.summary
    assert isinstance(said, TextBlock) and said.annotations[0].url == "https://example.com/refunds"
    assert answer.finish_reason == "stop"
    assert message.usages is not None and message.usages.reasoning_tokens == 64
    assert message.metadata["reasoning_ids"] == ["rs_67ccd2bf17f0819081ff3bb2cf6508e6"]
    called = from_response(fixture_json("responses_tool_call"))
    assert called.finish_reason == "tool_calls"
    assert [(c.id, c.args) for c in called.message.tool_calls()] == [
        ("call_12345xyz", {"order_id": "A-1042"})
    ]
    incomplete = {**fixture_json("responses_text"), "status": "incomplete"}
    incomplete["incomplete_details"] = {"reason": "max_output_tokens"}
    assert from_response(incomplete).finish_reason == "max_output_tokens"


def test_an_anthropic_answer_keeps_the_thinking_signature_for_the_way_back() -> None:
    answer = from_anthropic_message(fixture_json("anthropic_tool_use"))
    message = answer.message
    assert [b.type for b in message.content] == ["reasoning", "text", "tool_call"]
    assert answer.finish_reason == "tool_use"
    usage = message.usages
    assert usage is not None and (usage.prompt_tokens, usage.cache_read_input_tokens) == (512, 100)
    _, [turn] = to_anthropic_messages([message])
    thinking = turn["content"][0]
    assert thinking["type"] == "thinking" and thinking["signature"].startswith("EqQB")
    assert turn["content"][2] == {
        "type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "lookup_order",
        "input": {"order_id": "A-1042"},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("folder", "stream", "whole", "convert"),
    [
        (ChatStream, "chat_text", "chat_text", from_chat_completion),
        (ChatStream, "chat_tool_call", "chat_tool_call", from_chat_completion),
        (ChatStream, "chat_refund_call", "chat_refund_call", from_chat_completion),
        (ResponsesStream, "responses_text", "responses_text", from_response),
        (ResponsesStream, "responses_tool_call", "responses_tool_call", from_response),
        (AnthropicStream, "anthropic_text", "anthropic_text", from_anthropic_message),
        (AnthropicStream, "anthropic_tool_use", "anthropic_tool_use", from_anthropic_message),
    ],
)
def test_a_folded_stream_is_the_same_message_as_the_whole_answer(
    folder: Any, stream: str, whole: str, convert: Any
) -> None:
    fold = folder()
    deltas = [d for event in sse_data(stream) for d in fold.feed(event)]
    streamed, direct = fold.result(), convert(fixture_json(whole))
    assert streamed.message.content == direct.message.content
    assert streamed.finish_reason == direct.finish_reason
    said = "".join(d["delta"] for d in deltas if d["kind"] == "text")
    assert said == streamed.message.text()
    args = "".join(d["delta"] for d in deltas if d["kind"] == "tool_call")
    calls = streamed.message.tool_calls()
    assert (json.loads(args) if args else {}) == (calls[0].args if calls else {})


@pytest.mark.parametrize(
    ("folder", "stream"),
    [
        (ChatStream, "chat_tool_call"),
        (ResponsesStream, "responses_tool_call"),
        (AnthropicStream, "anthropic_tool_use"),
    ],
)
def test_tool_call_deltas_name_the_call_the_message_will_hold(folder: Any, stream: str) -> None:
    """A consumer can join a tool call's deltas to the call in the final message."""
    fold = folder()
    deltas = [d for event in sse_data(stream) for d in fold.feed(event)]
    [call] = fold.result().message.tool_calls()
    calls = [d for d in deltas if d["kind"] == "tool_call"]
    assert calls and all((d["call_id"], d["name"]) == (call.id, call.name) for d in calls)


@pytest.mark.parametrize(
    ("folder", "stream"),
    [
        (ChatStream, "chat_text"),
        (ResponsesStream, "responses_text"),
        (AnthropicStream, "anthropic_text"),
    ],
)
def test_a_stream_cut_short_is_a_stream_error(folder: Any, stream: str) -> None:
    fold = folder()
    for event in sse_data(stream)[:-2]:
        fold.feed(event)
    with pytest.raises(ModelStreamError, match="connection was cut"):
        fold.result()


def truncated_answers() -> list[tuple[str, Any]]:
    """A tool call cut at the token limit as each API reports it, whole or streamed."""
    chat = fixture_json("chat_tool_call")
    choice = chat["choices"][0]
    choice["finish_reason"] = "length"
    choice["message"]["tool_calls"][0]["function"]["arguments"] = '{"order_id": "A-10'
    responses = fixture_json("responses_tool_call")
    responses |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    responses["output"][0]["arguments"] = '{"order_id": "A-10'
    anthropic = fixture_json("anthropic_tool_use")
    anthropic["stop_reason"] = "max_tokens"
    anthropic["content"][-1]["input"] = '{"order_id": "A-10'
    stream = AnthropicStream()
    for event in sse_data("anthropic_tool_use"):
        if event.get("type") == "content_block_delta" and "partial_json" in event["delta"]:
            event["delta"]["partial_json"] = event["delta"]["partial_json"][:-3]
        if event.get("type") == "message_delta":
            event["delta"]["stop_reason"] = "max_tokens"
        stream.feed(event)
    return [
        ("length", lambda: from_chat_completion(chat)),
        ("max_output_tokens", lambda: from_response(responses)),
        ("max_tokens", lambda: from_anthropic_message(anthropic)),
        ("max_tokens", stream.result),
    ]


@pytest.mark.parametrize(("finish", "read"), truncated_answers())
def test_a_tool_call_cut_at_the_token_limit_is_a_truncated_error(finish: str, read: Any) -> None:
    """Not a broken answer to try again: the same limit would cut it again."""
    with pytest.raises(ModelTruncatedError, match="raise max_tokens") as caught:
        read()
    assert (caught.value.tool, caught.value.finish_reason) == ("lookup_order", finish)
    assert not isinstance(caught.value, ModelResponseError)


def test_unreadable_answers_are_response_errors() -> None:
    with pytest.raises(ModelResponseError, match="no choices"):
        from_chat_completion({"id": "x", "choices": []})
    broken = fixture_json("chat_tool_call")
    broken["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = '{"order_id": '
    with pytest.raises(ModelResponseError, match="arguments for tool 'lookup_order' are not JSON"):
        from_chat_completion(broken)
    with pytest.raises(ModelResponseError, match="no output list"):
        from_response({"id": "r"})
    with pytest.raises(ModelResponseError, match="no content list"):
        from_anthropic_message({"id": "m"})
    with pytest.raises(ModelResponseError, match="not a JSON object"):
        from_chat_completion("{not json")


def lookup_order(order_id: str, verbose: bool = False) -> str:
    """Look up an order.

    Args:
        order_id: The order's id.
    """
    return order_id


def test_a_tool_nodes_tools_in_each_providers_schema() -> None:
    node = ToolNode([lookup_order])
    [chat] = chat_tools(node)
    params = chat["function"]["parameters"]
    assert chat["type"] == "function" and chat["function"]["name"] == "lookup_order"
    assert params["required"] == ["order_id"]
    assert params["properties"]["order_id"]["description"] == "The order's id."
    assert responses_tools(node) == [{"type": "function", **chat["function"]}]
    assert anthropic_tools([lookup_order]) == [
        {"name": "lookup_order", "description": "Look up an order.", "input_schema": params}
    ]
    assert chat_tools(None) == []


def test_a_context_in_each_providers_format() -> None:
    call = ToolCallBlock(id="c1", name="lookup_order", args={"order_id": "A-1"})
    context = [
        Message.text_message("be brief", role="system"),
        Message.text_message("where is A-1?"),
        Message(role="assistant", content=[TextBlock(text="Looking."), call]),
        Message.tool_message([ToolResultBlock(call_id="c1", output={"status": "sent"})]),
        Message.tool_message([ToolResultBlock(call_id="c2", output="boom", is_error=True)]),
    ]
    chat = to_chat_messages(context, "You help.")
    assert [m["role"] for m in chat] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert chat[4] == {"role": "tool", "tool_call_id": "c1", "content": '{"status":"sent"}'}
    system, anthropic = to_anthropic_messages(context)
    assert system == "be brief"
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    assert [b["tool_use_id"] for b in anthropic[2]["content"]] == ["c1", "c2"]  # one user turn
    assert anthropic[2]["content"][1]["is_error"] is True
    items = to_responses_input(context)
    kinds = [i.get("type", i.get("role")) for i in items]
    assert kinds == ["system", "user", "message", "function_call"] + ["function_call_output"] * 2


def test_blocks_a_provider_cannot_carry_are_left_out() -> None:
    media = MediaRef(kind="url", url="https://example.com/v.mp4")
    odd: list[ContentBlock] = [
        TextBlock(text="see"),
        VideoBlock(media=media),
        DataBlock(mime_type="application/json", data_base64="e30="),
        ErrorBlock(message="it failed"),
    ]
    message = Message(role="user", content=odd)
    assert to_chat_messages([message])[0]["content"] == [
        {"type": "text", "text": "see"}, {"type": "text", "text": "it failed"},
    ]  # fmt: skip
    assert [b["type"] for b in to_anthropic_messages([message])[1][0]["content"]] == [
        "text",
        "text",
    ]
    assert [p["type"] for p in to_responses_input([message])[0]["content"]] == ["input_text"] * 2


# ---- round trips (hypothesis) --------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
json_objects = st.dictionaries(text, json_values, max_size=4)


@st.composite
def calls(draw: st.DrawFn) -> ToolCallBlock:
    """A tool call from the project's strategy, with arguments JSON can carry exactly."""
    block = draw(content_blocks(["tool_call"]))
    assert isinstance(block, ToolCallBlock)
    return block.model_copy(update={"args": draw(json_objects), "tool_type": None})


@st.composite
def assistant_messages(draw: st.DrawFn, reasoning: int = 3, texts: int = 3) -> Message:
    """An assistant turn as providers give one: reasoning, then text, then tool calls."""
    blocks: list[Any] = draw(st.lists(content_blocks(["reasoning"]), max_size=reasoning))
    blocks += draw(st.lists(content_blocks(["text"]), max_size=texts))
    blocks += draw(st.lists(calls(), max_size=3, unique_by=lambda c: c.id))
    return Message(role="assistant", content=blocks)


def essence(
    blocks: list[Any], *, merge_text: bool = False, merge_reasoning: bool = False
) -> list[Any]:
    """What a provider carries of each block, empty text left out, runs merged where the
    provider joins them."""
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            item: Any = ("text", block.text)
        elif isinstance(block, ReasoningBlock):
            item = ("reasoning", block.summary)
        elif isinstance(block, ToolCallBlock):
            item = ("call", block.id, block.name, block.args)
        elif isinstance(block, ImageBlock):
            item = ("image", ref(block.media))
        elif isinstance(block, DocumentBlock):
            where = ref(block.media)
            item = ("document", where, block.text if where is None else None)
        elif isinstance(block, AudioBlock):
            item = ("audio", block.media.data_base64)
        elif isinstance(block, ToolResultBlock):
            output = block.output if isinstance(block.output, str) else json.dumps(block.output)
            item = ("result", block.call_id, output)
        else:
            continue
        merge = (item[0] == "text" and merge_text) or (item[0] == "reasoning" and merge_reasoning)
        if merge and out and out[-1][0] == item[0]:
            out[-1] = (item[0], out[-1][1] + item[1])
        else:
            out.append(item)
    return [i for i in out if i[0] not in ("text", "reasoning") or i[1] or not merge_text]


def ref(media: MediaRef) -> str | None:
    """Where media is, as every provider can say it: a file id, a URL or a data URL."""
    if media.kind == "file_id":
        return f"file:{media.file_id}" if media.file_id else None
    url = media_url(media, "")
    if url and url.startswith("data:"):
        return "data:" + url.split(",", 1)[1]  # the MIME type a provider may default
    return url


@given(assistant_messages(reasoning=1))
def test_an_assistant_turn_round_trips_through_chat_completions(message: Message) -> None:
    [sent] = to_chat_messages([message], reasoning_key="reasoning_content")
    back = from_chat_completion({"choices": [{"message": sent, "finish_reason": "stop"}]})
    expected = essence(message.content, merge_text=True, merge_reasoning=True)
    assert essence(back.message.content, merge_text=True) == expected


@given(assistant_messages())
def test_an_assistant_turn_round_trips_through_anthropic(message: Message) -> None:
    thoughts = sum(isinstance(b, ReasoningBlock) for b in message.content)
    message.metadata["thinking_signatures"] = [f"sig-{i}" for i in range(thoughts)]
    _, sent = to_anthropic_messages([message])
    content = sent[0]["content"] if sent else []
    back = from_anthropic_message({"content": content, "stop_reason": "end_turn"})
    assert essence(back.message.content) == essence(message.content)
    [again] = from_anthropic_messages(sent) or [Message(role="assistant", content=[])]
    assert essence(again.content) == essence(message.content)


def test_thinking_anthropic_did_not_sign_is_left_out() -> None:
    """Reasoning of another model (no signature) would make Anthropic refuse the request."""
    turn = Message(
        role="assistant",
        content=[
            ReasoningBlock(summary="signed"),
            ReasoningBlock(summary="from another model"),
            TextBlock(text="hi"),
        ],
        metadata={"thinking_signatures": ["EqQB", None]},
    )
    _, [sent] = to_anthropic_messages([turn])
    assert sent["content"] == [
        {"type": "thinking", "thinking": "signed", "signature": "EqQB"},
        {"type": "text", "text": "hi"},
    ]
    unsigned = Message(role="assistant", content=[ReasoningBlock(summary="x")])
    _, sent_all = to_anthropic_messages([Message.text_message("q"), unsigned])
    assert [m["role"] for m in sent_all] == ["user"]  # a turn left with nothing is not sent


@given(assistant_messages())
def test_an_assistant_turn_round_trips_through_the_responses_api(message: Message) -> None:
    items = to_responses_input([message], reasoning=True)
    back = from_response({"output": items, "status": "completed"})
    assert essence(back.message.content) == essence(message.content)


user_blocks = st.lists(
    content_blocks(["text", "image", "document", "audio"]), min_size=1, max_size=4
)


def carried(blocks: list[Any], provider: str) -> list[Any]:
    """The user blocks `provider` takes: media it can point at; audio only chat, inline."""
    kept = []
    for block in blocks:
        if isinstance(block, AudioBlock):
            if provider == "chat" and block.media.data_base64:
                kept.append(block)
        elif isinstance(block, ImageBlock | DocumentBlock):
            where = ref(block.media)
            if (
                provider == "chat"
                and isinstance(block, ImageBlock)
                and block.media.kind == "file_id"
            ):
                where = None  # chat images are URLs
            if (
                provider == "chat"
                and isinstance(block, DocumentBlock)
                and block.media.kind == "url"
            ):
                where = None  # chat files are inline data or file ids
            if where is not None:
                kept.append(block)
            elif (
                provider == "anthropic"
                and isinstance(block, DocumentBlock)
                and block.text is not None
            ):
                kept.append(block)  # sent as a plain-text document
        else:
            kept.append(block)
    return kept


@given(user_blocks)
def test_user_content_round_trips_through_chat_completions(blocks: list[Any]) -> None:
    sent = to_chat_messages([Message(role="user", content=blocks)])
    [back] = to_messages(sent)
    assert essence(back.content, merge_text=True) == essence(
        carried(blocks, "chat"), merge_text=True
    )


@given(user_blocks)
def test_user_content_round_trips_through_anthropic(blocks: list[Any]) -> None:
    _, sent = to_anthropic_messages([Message(role="user", content=blocks)])
    back = from_anthropic_messages(sent)
    got = essence(back[0].content) if back else []
    assert got == essence(carried(blocks, "anthropic"))


@given(st.lists(content_blocks(["tool_result"]), min_size=1, max_size=3))
def test_tool_results_round_trip(results: list[Any]) -> None:
    results = [
        r.model_copy(update={"output": r.output if isinstance(r.output, str) else "x"})
        for r in results
    ]
    message = Message(role="tool", content=results)
    chat = to_messages(to_chat_messages([message]))
    assert essence([b for m in chat for b in m.content]) == essence(results)
    _, sent = to_anthropic_messages([message])
    [back] = from_anthropic_messages(sent)
    assert back.role == "tool" and essence(back.content) == essence(results)
    flags = [b.get("is_error", False) for b in sent[0]["content"]]
    assert flags == [r.is_error or r.status in ("failed", "rejected", "abandoned") for r in results]
    outputs = [i for i in to_responses_input([message]) if i["type"] == "function_call_output"]
    assert [(i["call_id"], i["output"]) for i in outputs] == [
        (r.call_id, r.output) for r in results
    ]


def test_the_request_hash_ignores_streaming_and_sees_everything_else() -> None:
    from agentlog.actors.models import request_hash

    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    same = request_hash("openai", request)
    streamed = {**request, "stream": True, "stream_options": {"include_usage": True}}
    assert request_hash("openai", streamed) == same
    assert request_hash("openai", dict(reversed(request.items()))) == same
    assert request_hash("anthropic", request) != same
    assert request_hash("openai", {**request, "temperature": 1}) != same
    assert request_hash("openai", {**request, "messages": []}) != same
