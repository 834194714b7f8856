"""The tool node: schemas from type hints, concurrent calls, results recorded and never re-run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from agentlog.actors.engine.context import NodeContext
from agentlog.actors.engine.errors import GraphError, GraphInterrupt
from agentlog.actors.testing import until
from agentlog.actors.tools.node import ToolNode
from agentlog.events import EventRecord, ToolCallFinished, ToolCallStarted, kind_of
from agentlog.events.kinds import Event
from agentlog.projections import AgentState, Message, TextBlock, ToolCallBlock, ToolResultBlock


def make_record(event: Event, seq: int = 1) -> EventRecord:
    """A committed record of `event`, as the journal would return it."""
    return EventRecord(
        thread_id="t1",
        seq=seq,
        position=seq,
        run_id="r1",
        actor="tools",
        at=0.0,
        kind=kind_of(event),
        version=1,
        event=event,
        hash="0" * 64,
    )


class FakeLog:
    """A NodeContext whose commits are kept, in order, for the test to inspect."""

    def __init__(self, step_records: Sequence[Event] = ()) -> None:
        self.commits: list[list[Event]] = []
        records = [make_record(e, i + 1) for i, e in enumerate(step_records)]
        self.context = NodeContext(
            thread_id="t1", run_id="r1", node="tools", commit=self.commit, step_records=records
        )

    async def commit(self, events: Sequence[Event]) -> list[EventRecord]:
        self.commits.append(list(events))
        return [make_record(e, len(self.commits)) for e in events]

    @property
    def events(self) -> list[Event]:
        return [e for batch in self.commits for e in batch]

    def finished(self) -> dict[str, ToolCallFinished]:
        return {e.call_id: e for e in self.events if isinstance(e, ToolCallFinished)}


def asking(*calls: tuple[str, str, dict[str, Any]]) -> AgentState:
    """A state whose last assistant message asks for `calls` as ToolCallBlocks."""
    blocks = [ToolCallBlock(id=cid, name=name, args=args) for cid, name, args in calls]
    return AgentState(
        context=[
            Message.text_message("go"),
            Message(role="assistant", content=[TextBlock(text="calling"), *blocks]),
        ]
    )


def result_of(message: Message) -> ToolResultBlock:
    assert message.role == "tool"
    (block,) = message.content
    assert isinstance(block, ToolResultBlock)
    return block


# --- schemas -----------------------------------------------------------------------------


class Point(BaseModel):
    x: int
    y: int


def get_weather(
    city: str, unit: Literal["c", "f"] = "c", days: int = 1, state: AgentState | None = None
) -> str:
    """Get the weather
    of a city.

    Longer text that is not part of the description.

    Args:
        city: The city,
            spelled out in full.
        unit (str): Temperature unit.
        state: Injected, never described.

    Returns:
        A forecast.
    """
    return f"sunny in {city}"


async def plot(point: Point, label: str | None = None, context: Any = None, config: Any = None):  # type: ignore[no-untyped-def]
    """Plot a point."""
    return point


def test_schema_has_types_required_defaults_and_docstring_descriptions() -> None:
    (schema,) = ToolNode([get_weather]).schemas()
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "get_weather"
    assert function["description"] == "Get the weather of a city."
    params = function["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["city"]
    props = params["properties"]
    assert list(props) == ["city", "unit", "days"]
    assert props["city"] == {"type": "string", "description": "The city, spelled out in full."}
    assert props["unit"]["enum"] == ["c", "f"]
    assert props["unit"]["default"] == "c"
    assert props["unit"]["description"] == "Temperature unit."
    assert props["days"] == {"type": "integer", "default": 1}


def test_schema_leaves_out_injected_parameters_and_describes_async_tools() -> None:
    (schema,) = ToolNode([plot]).schemas()
    params = schema["function"]["parameters"]
    assert schema["function"]["name"] == "plot"
    assert schema["function"]["description"] == "Plot a point."
    assert set(params["properties"]) == {"point", "label"}
    assert params["required"] == ["point"]
    assert "$ref" in params["properties"]["point"]
    assert params["$defs"]["Point"]["required"] == ["x", "y"]


def test_tool_without_docstring_or_hints_gets_an_empty_description_and_any_type() -> None:
    def echo(value):  # type: ignore[no-untyped-def]
        return value

    (schema,) = ToolNode([echo]).schemas()
    assert schema["function"]["description"] == ""
    assert schema["function"]["parameters"]["required"] == ["value"]
    assert "type" not in schema["function"]["parameters"]["properties"]["value"]


def test_duplicate_tool_names_are_refused_naming_the_tool() -> None:
    def search(q: str) -> str:
        return q

    def other(q: str) -> str:
        return q

    other.__name__ = "search"
    with pytest.raises(GraphError, match="'search'"):
        ToolNode([search, other])


def test_var_arguments_are_refused() -> None:
    def spread(*items: int) -> int:
        return sum(items)

    with pytest.raises(GraphError, match="spread"):
        ToolNode([spread])


# --- running calls -----------------------------------------------------------------------


async def test_tool_call_blocks_are_run_and_answered_in_call_order() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    async def shout(text: str) -> str:
        return text.upper()

    log = FakeLog()
    state = asking(("c1", "shout", {"text": "hi"}), ("c2", "add", {"a": 2, "b": "3"}))
    messages = await ToolNode([add, shout]).run(state, log.context)

    assert [m.message_id for m in messages] == ["tool-c1", "tool-c2"]
    first, second = (result_of(m) for m in messages)
    assert (first.call_id, first.output, first.is_error, first.status) == (
        "c1",
        "HI",
        False,
        "completed",
    )
    assert (second.call_id, second.output, second.status) == ("c2", 5, "completed")
    assert log.commits[0] == [
        ToolCallStarted(call_id="c1", name="shout", args={"text": "hi"}, node="tools"),
        ToolCallStarted(call_id="c2", name="add", args={"a": 2, "b": "3"}, node="tools"),
    ]
    finished = log.finished()
    assert finished["c1"].output == "HI" and finished["c1"].error is None
    assert finished["c2"].output == 5 and finished["c2"].duration_ms >= 0


async def test_openai_tools_calls_with_json_string_arguments() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assistant = Message(
        role="assistant",
        content=[],
        tools_calls=[
            {
                "id": "x1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
            },
            {
                "id": "x2",
                "type": "function",
                "function": {"name": "add", "arguments": {"a": 5, "b": 5}},
            },
        ],
    )
    log = FakeLog()
    messages = await ToolNode([add]).run(AgentState(context=[assistant]), log.context)
    assert [result_of(m).output for m in messages] == [3, 10]
    assert [result_of(m).call_id for m in messages] == ["x1", "x2"]
    assert log.commits[0][0] == ToolCallStarted(
        call_id="x1", name="add", args={"a": 1, "b": 2}, node="tools"
    )


async def test_nothing_to_do_without_an_assistant_message_or_without_calls() -> None:
    def never() -> None:
        raise AssertionError("must not run")

    node = ToolNode([never])
    log = FakeLog()
    only_user = AgentState(context=[Message.text_message("hi")])
    no_calls = AgentState(context=[Message.text_message("done", role="assistant")])
    assert await node.run(only_user, log.context) == []
    assert await node.run(no_calls, log.context) == []
    assert await node.run(AgentState(), log.context) == []
    assert log.commits == []


async def test_calls_run_concurrently_and_each_result_is_committed_as_it_ends() -> None:
    b_running = asyncio.Event()

    async def slow(n: int) -> int:
        # Only finishes if `fast` runs while `slow` is waiting: sequential calls would time out.
        await asyncio.wait_for(b_running.wait(), timeout=2)
        await until(lambda: len(log.commits) == 2, what="fast's result committed")
        return n

    async def fast(n: int) -> int:
        b_running.set()
        return n

    log = FakeLog()
    state = asking(("a", "slow", {"n": 1}), ("b", "fast", {"n": 2}))
    messages = await ToolNode([slow, fast]).run(state, log.context)

    kinds = [[type(e).__name__ for e in batch] for batch in log.commits]
    assert kinds == [
        ["ToolCallStarted", "ToolCallStarted"],
        ["ToolCallFinished"],
        ["ToolCallFinished"],
    ]
    # `fast` was durable before `slow` ended, although `slow` comes first in the message.
    assert [batch[0].call_id for batch in log.commits[1:]] == ["b", "a"]  # type: ignore[union-attr]
    assert [result_of(m).call_id for m in messages] == ["a", "b"]
    assert log.finished()["a"].status == "completed"


async def test_sync_tools_run_concurrently_off_the_event_loop() -> None:
    barrier = threading.Barrier(2, timeout=2)
    threads: list[threading.Thread] = []

    def meet(tag: str) -> str:
        threads.append(threading.current_thread())
        barrier.wait()  # both calls must be in their threads at once, or this breaks
        return tag

    log = FakeLog()
    state = asking(("a", "meet", {"tag": "x"}), ("b", "meet", {"tag": "y"}))
    messages = await ToolNode([meet]).run(state, log.context)

    assert [result_of(m).output for m in messages] == ["x", "y"]
    assert all(r.status == "completed" for r in log.finished().values())
    assert len(threads) == 2
    assert threading.main_thread() not in threads
    assert threading.current_thread() not in threads


async def test_one_call_fails_while_the_other_succeeds() -> None:
    def ok() -> str:
        return "fine"

    async def boom(reason: str) -> str:
        raise RuntimeError(f"broken: {reason}")

    log = FakeLog()
    state = asking(("a", "boom", {"reason": "disk"}), ("b", "ok", {}))
    messages = await ToolNode([ok, boom]).run(state, log.context)

    bad, good = (result_of(m) for m in messages)
    assert (bad.is_error, bad.status, bad.output) == (True, "failed", "RuntimeError: broken: disk")
    assert (good.is_error, good.status, good.output) == (False, "completed", "fine")
    finished = log.finished()
    assert finished["a"].status == "failed"
    assert finished["a"].error == "RuntimeError: broken: disk"
    assert finished["a"].output is None
    assert finished["b"].status == "completed" and finished["b"].error is None


async def test_bad_arguments_fail_the_call_without_running_the_tool() -> None:
    runs = 0

    def count(n: int) -> int:
        nonlocal runs
        runs += 1
        return n

    log = FakeLog()
    state = asking(
        ("a", "count", {"n": "not a number"}),
        ("b", "count", {}),
        ("c", "count", {"n": 1, "extra": True}),
        ("d", "count", {"n": "7"}),
    )
    messages = await ToolNode([count]).run(state, log.context)

    a, b, c, d = (result_of(m) for m in messages)
    assert a.status == b.status == c.status == "failed"
    assert a.output.startswith("ToolArgumentsError: invalid arguments for 'count': n:")
    assert "n: Field required" in b.output
    assert "extra: Extra inputs are not permitted" in c.output
    assert (d.status, d.output) == ("completed", 7)  # coerced to the annotated type
    assert runs == 1
    assert log.finished()["a"].error == a.output


async def test_unknown_tool_is_a_failed_call() -> None:
    def known() -> int:
        return 1

    log = FakeLog()
    messages = await ToolNode([known]).run(asking(("a", "missing", {})), log.context)
    (result,) = (result_of(m) for m in messages)
    assert result.is_error and result.status == "failed"
    assert result.output == "UnknownToolError: no tool named 'missing' (known tools: known)"
    assert log.finished()["a"].status == "failed"


async def test_output_is_stored_as_builtins_and_falls_back_to_repr() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque 42>"

    def model() -> Point:
        return Point(x=1, y=2)

    def opaque() -> Opaque:
        return Opaque()

    log = FakeLog()
    state = asking(("a", "model", {}), ("b", "opaque", {}))
    messages = await ToolNode([model, opaque]).run(state, log.context)

    assert [result_of(m).output for m in messages] == [{"x": 1, "y": 2}, "<Opaque 42>"]
    finished = log.finished()
    assert finished["a"].output == {"x": 1, "y": 2}
    assert finished["b"].output == "<Opaque 42>" and finished["b"].status == "completed"


async def test_state_and_context_are_injected_when_declared() -> None:
    seen: dict[str, Any] = {}

    def inspect_run(query: str, state: AgentState, context: NodeContext, config: Any) -> str:
        seen.update(state=state, context=context, config=config)
        return query

    log = FakeLog()
    state = asking(("a", "inspect_run", {"query": "q"}))
    messages = await ToolNode([inspect_run]).run(state, log.context)
    assert result_of(messages[0]).output == "q"
    assert seen == {"state": state, "context": log.context, "config": None}


async def test_a_tool_may_ask_for_its_call_id_which_stays_out_of_its_schema() -> None:
    keys: list[str] = []

    def charge(amount: int, tool_call_id: str) -> str:
        """Charge a card, once per call id."""
        keys.append(tool_call_id)
        return f"charged {amount}"

    node = ToolNode([charge])
    assert list(node.schemas()[0]["function"]["parameters"]["properties"]) == ["amount"]
    log = FakeLog()
    messages = await node.run(asking(("call-7", "charge", {"amount": 5})), log.context)
    assert result_of(messages[0]).output == "charged 5"
    assert keys == ["call-7"]


# --- resuming a step -----------------------------------------------------------------------


async def test_finished_calls_are_answered_from_the_log_and_not_run_again() -> None:
    runs: list[str] = []

    def work(tag: str) -> str:
        runs.append(tag)
        return f"fresh {tag}"

    recorded: list[Event] = [
        ToolCallStarted(call_id="a", name="work", args={"tag": "a"}, node="tools"),
        ToolCallStarted(call_id="b", name="work", args={"tag": "b"}, node="tools"),
        ToolCallFinished(call_id="a", name="work", output={"logged": [1, 2]}),
        ToolCallFinished(call_id="b", name="work", status="failed", error="ValueError: old"),
    ]
    log = FakeLog(recorded)
    state = asking(("a", "work", {"tag": "a"}), ("b", "work", {"tag": "b"}))
    messages = await ToolNode([work]).run(state, log.context)

    assert runs == []
    assert log.commits == []
    a, b = (result_of(m) for m in messages)
    assert (a.output, a.status, a.is_error) == ({"logged": [1, 2]}, "completed", False)
    assert (b.output, b.status, b.is_error) == ("ValueError: old", "failed", True)
    assert [m.message_id for m in messages] == ["tool-a", "tool-b"]


async def test_a_started_but_unfinished_call_runs_again_without_a_second_start() -> None:
    runs: list[str] = []

    def work(tag: str) -> str:
        runs.append(tag)
        return f"fresh {tag}"

    recorded: list[Event] = [
        ToolCallStarted(call_id="a", name="work", args={"tag": "a"}, node="tools"),
        ToolCallStarted(call_id="b", name="work", args={"tag": "b"}, node="tools"),
        ToolCallFinished(call_id="a", name="work", output="logged a"),
    ]
    log = FakeLog(recorded)
    state = asking(
        ("a", "work", {"tag": "a"}), ("b", "work", {"tag": "b"}), ("c", "work", {"tag": "c"})
    )
    messages = await ToolNode([work]).run(state, log.context)

    assert sorted(runs) == ["b", "c"]
    assert log.commits[0] == [
        ToolCallStarted(call_id="c", name="work", args={"tag": "c"}, node="tools")
    ]
    assert all(isinstance(e, ToolCallFinished) for batch in log.commits[1:] for e in batch)
    assert sorted(log.finished()) == ["b", "c"]
    assert [result_of(m).output for m in messages] == ["logged a", "fresh b", "fresh c"]


async def test_rerunning_a_step_gives_the_same_message_ids() -> None:
    def work() -> int:
        return 1

    state = asking(("a", "work", {}))
    first = await ToolNode([work]).run(state, FakeLog().context)
    second = await ToolNode([work]).run(state, FakeLog().context)
    assert [m.message_id for m in first] == [m.message_id for m in second] == ["tool-a"]


async def test_calls_already_answered_in_the_context_are_not_run_again() -> None:
    runs: list[str] = []

    def work(tag: str) -> str:
        runs.append(tag)
        return tag

    state = asking(("a", "work", {"tag": "a"}), ("b", "work", {"tag": "b"}))
    answered = Message.tool_message([ToolResultBlock(call_id="a", output="a")], "tool-a")
    state.context.append(answered)
    log = FakeLog()
    messages = await ToolNode([work]).run(state, log.context)
    assert runs == ["b"]
    assert [result_of(m).call_id for m in messages] == ["b"]
    assert [e.call_id for e in log.events] == ["b", "b"]  # type: ignore[union-attr]


async def test_an_interrupt_from_a_tool_pauses_the_node_after_the_others_are_recorded() -> None:
    asked = asyncio.Event()

    async def ask_human(question: str) -> str:
        asked.set()
        raise GraphInterrupt("needs approval", {"question": question})

    async def lookup() -> str:
        await asked.wait()  # ends after the interrupt was raised
        return "found"

    log = FakeLog()
    state = asking(("a", "ask_human", {"question": "ok?"}), ("b", "lookup", {}))
    with pytest.raises(GraphInterrupt, match="needs approval"):
        await ToolNode([ask_human, lookup]).run(state, log.context)
    assert list(log.finished()) == ["b"]
