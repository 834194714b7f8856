"""`agentlog show` on big data: the bounded view against the full one, and the step history.

Two threads are written straight to a `SQLiteEventStore` in a temporary directory: "huge",
one message of 10 MB (2 MB with --quick), and "long", N one-line messages (20,000; 5,000
with --quick). Their states are folded once (untimed); then, alternating round by round,
the show view is rendered to an in-memory console as `agentlog show` does when piped
(no wrapping), bounded (the default: the last 20 messages, texts cut at 2,000 characters)
and full (`--full`). Reported: median seconds and characters printed of each, and their
ratios (full / bounded).

End to end, once: `agentlog show long` as a subprocess on a 100,000-message thread (10,000
with --quick), bounded, with its wall time, output size and peak memory (max RSS).

history: `state_history` of a thread of S steps with nothing between them (10,001; 2,001
with --quick), against the former status scan (forward from each step to the next
boundary, quadratic there) computed on the same records.

Usage: .venv/bin/python bench/show.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import io
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as common
from rich.console import Console

try:  # the CLI's renderer, in its own package (earlier: the module actors.cli_render)
    from agentlog.actors.cli import render
except ImportError:
    from agentlog.actors import cli_render as render  # type: ignore[attr-defined,no-redef]
from agentlog.events import RunStarted, SQLiteEventStore, StepAdvanced
from agentlog.events.kinds import Event
from agentlog.projections import Message, message_appended, state_at, state_history
from agentlog.projections.timetravel import _STEP_BOUNDARY, step_status

ROOT = Path(__file__).resolve().parent.parent
HUGE_CHARS, QUICK_HUGE_CHARS = 10_000_000, 2_000_000
LONG, QUICK_LONG = 20_000, 5_000
E2E_LONG, QUICK_E2E_LONG = 100_000, 10_000
STEPS, QUICK_STEPS = 10_001, 2_001
CLI = "from agentlog.actors.cli import main; main()"


async def write(path: Path, huge_chars: int, long_n: int, e2e_n: int, steps: int) -> None:
    async with SQLiteEventStore(path) as store:
        big = Message.text_message("A" * huge_chars, role="assistant")
        first: list[Event] = [RunStarted(entry_node="agent"), message_appended(big)]
        await store.append("huge", first, expected_seq=0)
        for thread, n in (("long", long_n), ("e2e", e2e_n)):
            seq = len(await store.append(thread, [RunStarted(entry_node="agent")], expected_seq=0))
            for start in range(0, n, 1000):
                batch: list[Event] = [
                    message_appended(Message.text_message(f"message {i}", role="assistant"))
                    for i in range(start, min(n, start + 1000))
                ]
                seq += len(await store.append(thread, batch, expected_seq=seq))
        seq = len(await store.append("steps", [RunStarted(entry_node="agent")], expected_seq=0))
        for start in range(1, steps + 1, 1000):
            batch = [StepAdvanced(step=s) for s in range(start, min(steps, start + 999) + 1)]
            seq += len(await store.append("steps", batch, expected_seq=seq))


def rendered(thread: str, state: Any, bounds: render.Bounds) -> tuple[float, int]:
    """Seconds to render the show view, and the characters it printed."""
    out = io.StringIO()
    console = Console(file=out, width=1_000_000, highlight=False, color_system=None)
    start = time.perf_counter()
    console.print(render.state_view(thread, 0, state, bounds), soft_wrap=True)
    return time.perf_counter() - start, len(out.getvalue())


def forward_statuses(events: list[Event]) -> dict[int, str]:
    """The former scan: from each step forward to the next boundary."""
    out: dict[int, str] = {}
    for i, event in enumerate(events):
        if not isinstance(event, StepAdvanced):
            continue
        status, j = "running", i + 1
        while j < len(events) and events[j].KIND not in _STEP_BOUNDARY:
            status = step_status(events[j]) or status
            j += 1
        out[i] = status
    return out


def _contender(
    thread: str, state: Any, bounds: render.Bounds, name: str, chars: dict[str, int]
) -> Callable[[], float]:
    def timed() -> float:
        seconds, chars[name] = rendered(thread, state, bounds)
        return seconds

    return timed


def bench_render(path: Path, rounds: int) -> dict[str, Any]:
    async def load(thread: str) -> Any:
        async with SQLiteEventStore(path) as store:
            return await state_at(store, thread)

    result: dict[str, Any] = {}
    for thread in ("huge", "long"):
        state = asyncio.run(load(thread))
        chars: dict[str, int] = {}
        contenders = {
            name: _contender(thread, state, bounds, name, chars)
            for name, bounds in (("bounded", render.Bounds()), ("full", render.Bounds.full()))
        }
        common.log(f"rendering {thread!r}: bounded vs full")
        samples = common.alternate(rounds, contenders)
        med = common.medians(samples)
        result[thread] = {
            "messages": len(state.context),
            "bounded_ms": common.ms(med["bounded"]),
            "full_ms": common.ms(med["full"]),
            "time_ratio_full_to_bounded": common.ratio(med["full"], med["bounded"]),
            "bounded_chars": chars["bounded"],
            "full_chars": chars["full"],
            "size_ratio_full_to_bounded": common.ratio(chars["full"], chars["bounded"]),
        }
    return result


def bench_end_to_end(path: Path) -> dict[str, Any]:
    common.log("agentlog show e2e (subprocess, bounded)")
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agentlog.actors.cli import main; main()",
            "show",
            "e2e",
            "--db",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "ok": done.returncode == 0,
        "seconds": round(seconds, 3),
        "stdout_chars": len(done.stdout),
        "max_rss_mb": round(peak_kb / 1024, 1),
    }


def bench_history(path: Path, rounds: int) -> dict[str, Any]:
    async def history() -> float:
        async with SQLiteEventStore(path) as store:
            start = time.perf_counter()
            entries = await state_history(store, "steps")
            seconds = time.perf_counter() - start
            assert entries and all(e.status == "running" for e in entries)
            return seconds

    async def events() -> list[Event]:
        async with SQLiteEventStore(path) as store:
            return [r.event async for r in store.read("steps")]

    recorded = asyncio.run(events())
    steps = sum(isinstance(e, StepAdvanced) for e in recorded)
    common.log(f"state_history of {steps} steps vs the former scan")
    samples = common.alternate(
        rounds,
        {
            "state_history": lambda: asyncio.run(history()),
            "former_scan_only": common.timer(lambda: forward_statuses(recorded)),
        },
    )
    med = common.medians(samples)
    return {
        "steps": steps,
        "state_history_ms": common.ms(med["state_history"]),
        "former_status_scan_alone_ms": common.ms(med["former_scan_only"]),
        "ratio_former_scan_to_whole_history": common.ratio(
            med["former_scan_only"], med["state_history"]
        ),
    }


def main() -> None:
    args = common.parse_args(__doc__ or "")
    quick = args.quick
    sizes = (
        (QUICK_HUGE_CHARS, QUICK_LONG, QUICK_E2E_LONG, QUICK_STEPS)
        if quick
        else (HUGE_CHARS, LONG, E2E_LONG, STEPS)
    )
    with common.temp_dir() as directory, common.scratch_db(directory, "show") as path:
        common.log(f"writing threads: huge={sizes[0]} chars, long={sizes[1]}, e2e={sizes[2]}")
        asyncio.run(write(path, *sizes))
        rendering = bench_render(path, args.rounds)
        end_to_end = bench_end_to_end(path)
        history = bench_history(path, args.rounds)
    common.emit(
        {
            "bench": "show",
            "quick": quick,
            "render": rendering,
            "show_end_to_end": {"messages": sizes[2], **end_to_end},
            "history": history,
            "rounds": args.rounds,
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
