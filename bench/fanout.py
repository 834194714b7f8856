"""agentlog's side of the fan-out workload: `Send` to 8 branches, reduced by a join.

Shared by bench/peers/agentlog_driver.py (`--workload fanout`) and the bench tests; the
LangGraph driver builds the same graph in its own idiom (bench/peers/README.md states the
contract), both computing what bench/peers/fanout_spec.py writes down. One run, on a fresh thread:

* `plan`, a plain `def`, reads the input's `topic` and plans 8 items;
* a condition, a plain `def` reading `state.items`, returns one `Send("work", {"item": i})`
  per item: 8 branches of one superstep;
* `work`, a plain `def`, receives its `Send`'s input and returns a 200-character result
  into `results`, a field with a reducer (`Annotated[list[str], operator.add]`), so the 8
  results merge in branch order;
* `join`, a plain `def`, reduces them to `summary`; then END.

Three steps per run (plan, the 8 branches, join), durable per step on the SQLite store.
"""

from __future__ import annotations

import operator
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):  # agentlog; bench/peers/ as the package `peers`
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from peers.fanout_spec import (  # noqa: E402
    BRANCHES,
    build,
    expected,
    figures,
    final_of,
    item,
    result_text,
    summary_of,
    thread_of,
    time_runs,
    topic,
)

from agentlog import END, START, AgentState, Send, StateGraph  # noqa: E402
from agentlog.events import BranchEntered, SQLiteEventStore, StepAdvanced  # noqa: E402
from agentlog.events.kinds import Event  # noqa: E402

__all__ = [
    "BRANCHES",
    "FanState",
    "expected",
    "fanout_graph",
    "figures",
    "run_fanout",
    "run_ported",
]


class FanState(AgentState):
    """The fan-out graph's state: `results` has a reducer, so 8 branches may write it."""

    topic: str = ""
    items: list[str] = Field(default_factory=list)
    results: Annotated[list[str], operator.add] = Field(default_factory=list)
    summary: str = ""


def fanout_graph(branches: int = BRANCHES) -> StateGraph[FanState]:
    """plan -> `Send` to `branches` work branches -> join -> END, all plain `def`s."""

    def plan(state: FanState) -> dict[str, Any]:
        return {"items": [item(state.topic, i) for i in range(branches)]}

    def route(state: FanState) -> list[Send]:
        return [Send("work", {"item": planned}) for planned in state.items]

    def work(state: dict[str, Any]) -> dict[str, Any]:  # a Send's branch gets its input
        return {"results": [result_text(state["item"])]}

    def join(state: FanState) -> dict[str, Any]:
        return {"summary": summary_of(state.results)}

    graph: StateGraph[FanState] = StateGraph(FanState)
    graph.add_node("plan", plan)
    graph.add_node("work", work)
    graph.add_node("join", join)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", route, ["work"])
    graph.add_edge("work", "join")
    graph.add_edge("join", END)
    return graph


@dataclass
class AppendLog:
    """Every `append` of one store: its events, and a commit total before and after it."""

    commits: Callable[[], int]
    batches: list[tuple[list[Event], int, int]] = field(default_factory=list)

    def wrap(self, store: SQLiteEventStore) -> None:
        real = store.append

        async def logged(thread_id: str, events: Any, **kwargs: Any) -> Any:
            before = self.commits()
            out = await real(thread_id, events, **kwargs)
            self.batches.append((list(events), before, self.commits()))
            return out

        store.append = logged  # type: ignore[method-assign]

    def fanout_steps(self) -> list[tuple[int, int]]:
        """(appends, commits) of each fan-out step: from the append entering its branches
        to the one holding its `step_advanced`, both included."""
        out: list[tuple[int, int]] = []
        start: int | None = None
        for i, (events, _, _) in enumerate(self.batches):
            if start is None and any(isinstance(e, BranchEntered) for e in events):
                start = i
            if start is not None and any(isinstance(e, StepAdvanced) for e in events):
                out.append((i - start + 1, self.batches[i][2] - self.batches[start][1]))
                start = None
        return out


@dataclass
class FanoutResult:
    """One timed series of runs."""

    seconds: float
    per_run: list[float]
    finals: list[dict[str, Any]]  # each run's `results` and `summary`, as invoke returned
    stored_last: dict[str, Any]  # the last run's, loaded back from the store
    steps_per_run: int
    appends: AppendLog | None = None


async def run_fanout(
    path: str | Path,
    runs: int,
    *,
    branches: int = BRANCHES,
    commits: Callable[[], int] | None = None,
) -> FanoutResult:
    """`runs` invocations of the fan-out graph, each on a fresh thread, on one store at
    `path`; each run timed alone (opening and compiling are outside). `commits`, when
    given (untimed runs only), also logs every append with the commit total around it."""
    async with SQLiteEventStore(path) as store:
        appends = AppendLog(commits) if commits is not None else None
        if appends is not None:
            appends.wrap(store)
        compiled = fanout_graph(branches).compile(store)
        per_run: list[float] = []
        states: list[FanState] = []
        start = time.perf_counter()
        for k in range(runs):
            began = time.perf_counter()
            out = await compiled.ainvoke(
                {"topic": topic(k)}, {"thread_id": thread_of(k)}, include_state=True
            )
            per_run.append(time.perf_counter() - began)
            states.append(out["state"])
        seconds = time.perf_counter() - start
        last = await compiled.aget_state({"thread_id": thread_of(runs - 1)})
    return FanoutResult(
        seconds=seconds,
        per_run=per_run,
        finals=[{"results": s.results, "summary": s.summary} for s in states],
        stored_last={"results": last.results, "summary": last.summary},
        steps_per_run=states[-1].execution_meta.step if states else 0,
        appends=appends,
    )


def run_ported(path: str | Path, runs: int, *, branches: int = BRANCHES) -> FanoutResult:
    """The LangGraph columns' very graph (`fanout_spec.build`) from `agentlog.langgraph`,
    run as the LangGraph driver runs it: sync `invoke` per run, the persistence line
    `compile(checkpointer=SQLiteEventStore(path))` (the store opened on first use)."""
    import agentlog.langgraph as api  # a port's one import

    graph = build(api, branches).compile(checkpointer=SQLiteEventStore(path))
    seconds, per_run, finals = time_runs(graph.invoke, runs)
    last = graph.get_state({"configurable": {"thread_id": thread_of(runs - 1)}})
    return FanoutResult(
        seconds=seconds,
        per_run=per_run,
        finals=finals,
        stored_last=final_of(last.values),
        steps_per_run=3,  # plan, the branches, join (the front's values carry no step)
    )
