"""The viewer at /ui on long threads: how long the first view and a thread's timeline take
in a real browser at 100, 1,000 and 10,000 steps (1,000 at most with --quick).

For each size, one thread of N steps (bench/workload.py's async-scripted agent/tools loop,
run through the HTTP API) is the only thread of a database of its own, served by uvicorn in
this process. Debian's Chromium (Playwright, `/usr/bin/chromium`) then loads, round by
round, alternating:

* first_view: `/ui`, until the threads table is drawn; first_view_verified: until every
  verify badge has answered too (a badge takes a check of the same head up to a minute
  old, `verify?max_age=60`; the warm-up's made the first);
* timeline: `/ui/threads/{id}`, until its first page of records (500) is drawn;
* floor: `/ui/threads/{none}`, the same page and script with one API answer (404) and no
  log read: what any view costs here, so `*_over_floor` is what reading the log adds.

A view ends when the page sets `data-ready` on its body (and, for the first view, no badge
waits). The server keeps what a thread's head decides (its summary, its last check), so
the rounds measure a thread whose head has not moved since the warm-up, as a user's second
look does. Figures are medians over the rounds, in ms; the target is 300 ms at 10,000 steps.

Usage: .venv/bin/python bench/viewer.py [--quick] [--rounds N]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import _common as common
import httpx
import workload
from serve import served

from agentlog.actors.runtime import AgentRuntime, EntryPoint
from agentlog.events import SQLiteEventStore

SIZES = (100, 1_000, 10_000)
QUICK_SIZES = (100, 1_000)
CHROMIUM = "/usr/bin/chromium"
TARGET_MS = 300.0


async def load(page: Any, path: str, wait_badges: bool = False) -> float:
    """Seconds from navigating to `path` until the view is drawn."""
    start = time.perf_counter()
    await page.goto(path)
    await page.wait_for_selector("body[data-ready]")
    if wait_badges:
        await page.wait_for_function("() => !document.querySelector('.badge.wait')")
    return time.perf_counter() - start


async def one_size(directory: Path, steps: int, rounds: int, browser: Any) -> dict[str, Any]:
    async with SQLiteEventStore(common.fresh_path(directory)) as store:
        runtime = AgentRuntime(store)
        graph = workload.Loop("async-scripted", steps).graph()
        runtime.add_graph("loop", graph.compile(store, recursion_limit=steps + 10))
        runtime.register_entry_point(EntryPoint(id="loop", graph_id="loop"))
        server, task, url = await served(runtime)
        try:
            common.log(f"building a thread of {steps} steps")
            async with httpx.AsyncClient(base_url=url, timeout=600) as http:
                ran = await http.post(
                    "/log/threads/long/runs/wait",
                    json={"assistant_id": "loop", "input": workload.FIRST_MESSAGE},
                )
                assert ran.status_code == 200, ran.text
                step = (await http.get("/log/threads/long")).json()["step"]
                assert step == steps, f"{step} steps taken, expected {steps}"
            context = await browser.new_context(base_url=url)
            page = await context.new_page()
            await load(page, "/ui/threads/long")  # warm: the first read opens what it reads
            rows = await page.locator("tr.step").count()
            samples: dict[str, list[float]] = {
                "first_view": [],
                "first_view_verified": [],
                "timeline": [],
                "floor": [],
            }
            for _ in range(rounds):
                samples["first_view"].append(await load(page, "/ui"))
                samples["first_view_verified"].append(await load(page, "/ui", wait_badges=True))
                samples["timeline"].append(await load(page, "/ui/threads/long"))
                samples["floor"].append(await load(page, "/ui/threads/none"))
            await context.close()
        finally:
            server.should_exit = True
            await task
    medians = {name: common.median(values) for name, values in samples.items()}
    return {
        "steps": steps,
        "timeline_rows_drawn": rows,
        **{f"{name}_ms": common.ms(value) for name, value in medians.items()},
        "first_view_over_floor": common.ratio(medians["first_view"], medians["floor"]),
        "first_view_verified_over_floor": common.ratio(
            medians["first_view_verified"], medians["floor"]
        ),
        "timeline_over_floor": common.ratio(medians["timeline"], medians["floor"]),
    }


async def run(sizes: tuple[int, ...], rounds: int) -> list[dict[str, Any]]:
    from playwright.async_api import async_playwright

    results = []
    with common.temp_dir() as directory:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                for steps in sizes:
                    results.append(await one_size(directory, steps, rounds, browser))
                    common.log(f"  {results[-1]}")
            finally:
                await browser.close()
    return results


def main() -> None:
    args = common.parse_args(__doc__ or "")
    sizes = QUICK_SIZES if args.quick else SIZES
    results = asyncio.run(run(sizes, args.rounds))
    largest = results[-1]
    common.emit(
        {
            "bench": "viewer",
            "rounds": args.rounds,
            "sizes": results,
            "target_ms": TARGET_MS,
            "largest_within_target": max(largest["first_view_ms"], largest["timeline_ms"])
            < TARGET_MS,
            **common.environment(),
        }
    )


if __name__ == "__main__":
    main()
