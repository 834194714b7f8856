"""What the model layer costs, in one run: converter throughput (a provider's answer ->
`Message` per second) against building the same `Message` by hand, and the per-step
overhead of a `ModelNode` over a bare node calling the same local server with the same
client (request building, the request hash, conversion, the `model_called` record).

The server is the tests' fake provider on 127.0.0.1 answering a recorded chat completion,
so both nodes pay the same HTTP round trip. Rounds alternate the contenders; medians.

Usage: .venv/bin/python bench/models.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from anthropic.types import Message as AnthropicMessage  # noqa: E402
from openai.types.chat import ChatCompletion  # noqa: E402

from agentlog.actors import END, StateGraph  # noqa: E402
from agentlog.actors.models import (  # noqa: E402
    ModelNode,
    from_anthropic_message,
    from_chat_completion,
    from_response,
)
from agentlog.events import MemoryEventStore  # noqa: E402
from agentlog.projections import (  # noqa: E402
    AgentState,
    Message,
    ReasoningBlock,
    TextBlock,
    TokenUsages,
    ToolCallBlock,
)
from tests.workers.fake_provider import FakeProvider, fixture_json  # noqa: E402

CHAT = fixture_json("chat_tool_call")
RESPONSES = fixture_json("responses_text")
ANTHROPIC = fixture_json("anthropic_tool_use")


def by_hand_chat(data: dict[str, Any]) -> Message:
    """The chat tool-call answer built directly: what a user writes without converters."""
    choice = data["choices"][0]
    call = choice["message"]["tool_calls"][0]
    usage = data["usage"]
    return Message(
        role="assistant",
        content=[
            ToolCallBlock(
                id=call["id"],
                name=call["function"]["name"],
                args=json.loads(call["function"]["arguments"]),
            )
        ],
        usages=TokenUsages(
            prompt_tokens=usage["prompt_tokens"],
            completion_tokens=usage["completion_tokens"],
            total_tokens=usage["total_tokens"],
        ),
        metadata={"model": data["model"], "finish_reason": choice["finish_reason"]},
    )


def by_hand_anthropic(data: dict[str, Any]) -> Message:
    """The Anthropic answer (thinking, text, tool use) built directly."""
    thinking, said, use = data["content"]
    usage = data["usage"]
    return Message(
        role="assistant",
        content=[
            ReasoningBlock(summary=thinking["thinking"]),
            TextBlock(text=said["text"]),
            ToolCallBlock(id=use["id"], name=use["name"], args=dict(use["input"])),
        ],
        usages=TokenUsages(
            prompt_tokens=usage["input_tokens"],
            completion_tokens=usage["output_tokens"],
            total_tokens=usage["input_tokens"] + usage["output_tokens"],
        ),
        metadata={"model": data["model"], "finish_reason": data["stop_reason"]},
    )


def throughput(fn: Callable[[Any], Any], value: Any, n: int) -> Callable[[], float]:
    """A contender converting `value` n times; returns the seconds taken."""

    def run() -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn(value)
        return time.perf_counter() - start

    return run


def converters(rounds: int, n: int) -> dict[str, Any]:
    chat_sdk = ChatCompletion.model_validate(CHAT)
    anthropic_sdk = AnthropicMessage.model_validate(ANTHROPIC)
    contenders = {
        "chat_dict": throughput(from_chat_completion, CHAT, n),
        "chat_sdk_object": throughput(from_chat_completion, chat_sdk, n),
        "chat_by_hand": throughput(by_hand_chat, CHAT, n),
        "responses_dict": throughput(from_response, RESPONSES, n),
        "anthropic_dict": throughput(from_anthropic_message, ANTHROPIC, n),
        "anthropic_sdk_object": throughput(from_anthropic_message, anthropic_sdk, n),
        "anthropic_by_hand": throughput(by_hand_anthropic, ANTHROPIC, n),
    }
    medians = common.medians(common.alternate(rounds, contenders, warmup=1))
    per_s = {name: common.per_second(n, s) for name, s in medians.items()}
    return {
        "per_second": per_s,
        "chat_ratio_to_by_hand": common.ratio(per_s["chat_dict"], per_s["chat_by_hand"]),
        "anthropic_ratio_to_by_hand": common.ratio(
            per_s["anthropic_dict"], per_s["anthropic_by_hand"]
        ),
    }


def one_node(fn: Any) -> Any:
    graph: StateGraph[AgentState] = StateGraph()
    graph.add_node("agent", fn)
    graph.set_entry_point("agent")
    graph.add_edge("agent", END)
    return graph.compile(checkpointer=MemoryEventStore())


async def steps(server: FakeProvider, rounds: int, n: int) -> dict[str, Any]:
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="sk-bench", max_retries=0)

    async def bare(state: AgentState) -> list[Message]:
        """The same call, by hand: the messages written out, the text read back."""
        sent = [{"role": "user", "content": m.text()} for m in state.context]
        response = await client.chat.completions.create(model="bench-model", messages=sent)
        text = response.choices[0].message.content or ""
        return [Message(role="assistant", content=[TextBlock(text=text)])]

    graphs = {
        "model_node": one_node(ModelNode(client, model="bench-model")),
        "bare_node": one_node(bare),
    }
    samples: dict[str, list[float]] = {name: [] for name in graphs}
    for r in range(rounds + 1):
        for name, graph in graphs.items():
            start = time.perf_counter()
            for i in range(n):
                await graph.ainvoke(
                    {"messages": ["where is my order?"]}, {"thread_id": f"{name}-{r}-{i}"}
                )
            if r:  # round 0 warms up
                samples[name].append((time.perf_counter() - start) / n)
        if r:
            shown = ", ".join(f"{k}={common.ms(v[-1])} ms" for k, v in samples.items())
            common.log(f"  steps round {r}/{rounds}: {shown}")
    medians = common.medians(samples)
    return {
        "ms_per_step": {k: common.ms(v) for k, v in medians.items()},
        "overhead_ms": common.ms(medians["model_node"] - medians["bare_node"]),
        "model_node_ratio_to_bare": common.ratio(medians["model_node"], medians["bare_node"]),
    }


async def main_async(rounds: int, n: int) -> dict[str, Any]:
    async with FakeProvider() as server:
        return await steps(server, rounds, n)


def main() -> None:
    parser = common.argument_parser(__doc__.splitlines()[0])
    args = common.checked(parser)
    n_convert, n_steps = (2_000, 40) if args.quick else (10_000, 150)
    common.log(f"converters: {n_convert} conversions per contender and round")
    converted = converters(args.rounds, n_convert)
    common.log(f"steps: {n_steps} one-node runs per contender and round")
    stepped = asyncio.run(main_async(args.rounds, n_steps))
    common.emit(
        {
            "bench": "models",
            "rounds": args.rounds,
            "conversions": n_convert,
            "steps": n_steps,
            "converters": converted,
            "node": stepped,
            "note": "medians in one run; conversions from the recorded answers in "
            "tests/fixtures/models; steps are one-node runs on a MemoryEventStore against the "
            "fake provider on 127.0.0.1 (both nodes make the same HTTP call)",
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
