"""The runtime facade answers what a front end asks, from the log and the runtime, without
the front end reading the runtime's internals: a thread's creation, graph, listing,
deletion and fork, and a run's lookup, records and end."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlog.actors.runtime import UnknownRunError
from agentlog.actors.runtime.facade import RuntimeFacade, created_metadata, hidden, hidden_by
from agentlog.events import SQLiteEventStore
from tests.test_serve import build


async def test_a_thread_is_created_listed_forked_and_hidden_through_the_facade(
    tmp_path: Path,
) -> None:
    async with SQLiteEventStore(tmp_path / "facade.db") as store:
        runtime = build(store)
        rt = RuntimeFacade(runtime)
        async with runtime:
            assert rt.ready and rt.graph_ids() == ["support", "other"]
            assert not await rt.has_records("t")
            created = await rt.create_thread("t", "support", by="ann", metadata={"k": 1})
            assert created
            again = await rt.create_thread("t", "support", by="ann", metadata={"k": 2})
            assert not again  # in the log already: nothing written
            assert await rt.has_records("t") and not rt.has_runs("t")
            assert await rt.graph_of("t") == "support"
            state = await rt.state("t", "support")
            assert created_metadata(state) == {"k": 1} and not hidden(state)
            first, latest = await rt.thread_times("t")
            assert first is not None and latest is not None and first <= latest
            copy = await rt.fork_thread(
                "t", "support", at_step=None, new_thread_id="t2", actor="ann"
            )
            assert copy == "t2"
            listed = await rt.listed_threads()
            assert listed[:2] == ["t2", "t"]  # newest first
            assert not any(rt.is_internal(t) for t in listed)
            await rt.hide_thread("t", "support", by="ops", reason="spam")
            gone = await rt.state("t", "support")
            assert hidden(gone) and hidden_by(gone) == "ops"


async def test_a_run_is_submitted_found_followed_and_waited_for(tmp_path: Path) -> None:
    async with SQLiteEventStore(tmp_path / "runs.db") as store:
        runtime = build(store)
        rt = RuntimeFacade(runtime)
        async with runtime:
            run = await rt.submit(
                "notes",
                "hi",
                thread_id="n",
                idempotency_key="k1",
                actor="ann",
                multitask_strategy=None,
                correlation_id=None,
            )
            assert rt.run(run.id) is run and rt.knows_key("notes", "ann", "k1")
            result = await rt.wait_for(run.id, timeout=30)
            assert result["state"].execution_meta.step >= 1
            ended = rt.run_now(run)
            assert ended.done and not rt.is_running(run.id)
            assert rt.runs_on("n") == [ended] and rt.latest_run_on("n") is ended
            assert rt.runs_holding("n") == set()
            assert await rt.find_run("n", run.id) is ended
            with pytest.raises(UnknownRunError):
                await rt.find_run("other-thread", run.id)
            records = [r async for r in rt.run_records(ended, 0)]
            assert records[-1].kind == "trigger_finished"
            own = [r for r in records if r.thread_id == "n"]
            assert own and all(rt.run_at("n", r.seq) == run.id for r in own)
