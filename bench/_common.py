"""Shared benchmark plumbing: arguments, alternating rounds, medians, temp databases, output.

Every benchmark measures ours and its baseline in the same process, alternating them round
by round (A B A B ...) so that the noise of a shared machine hits both alike, and reports
medians. Each script prints exactly one JSON line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from events import SQLiteEventStore
from events import sqlite as sqlite_backend

_START = time.perf_counter()
_names = itertools.count(1)


def parse_args(description: str) -> argparse.Namespace:
    """`--quick` (smaller sizes) and `--rounds N` (default 5)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, well under 40 s")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def log(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since start."""
    print(f"[{time.perf_counter() - _START:7.2f}s] {message}", file=sys.stderr, flush=True)


def median(samples: list[float]) -> float:
    """The median of a non-empty list of samples."""
    return statistics.median(samples)


def per_second(work: float, seconds: float) -> float:
    """`work` units per second, rounded for the report."""
    return round(work / seconds, 1) if seconds > 0 else float("inf")


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded for the report."""
    return round(seconds * 1000.0, 3)


def ratio(a: float, b: float) -> float:
    """a / b, rounded for the report."""
    return round(a / b, 3) if b else float("inf")


def alternate(
    rounds: int, contenders: Mapping[str, Callable[[], float]], *, warmup: int = 0
) -> dict[str, list[float]]:
    """Run every contender once per round, in order (A B A B ...); return their samples.

    A contender returns the seconds it measured itself, so it can leave its setup untimed.
    `warmup` rounds run first and are thrown away. The garbage of one run is collected
    before the next, so that no contender pays for another's.
    """
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(warmup + rounds):
        for name, run in contenders.items():
            gc.collect()
            seconds = run()
            if i >= warmup:
                samples[name].append(seconds)
        label = "warmup" if i < warmup else f"round {i - warmup + 1}/{rounds}"
        shown = ", ".join(f"{n}={ms(s[-1]) if s else '-'} ms" for n, s in samples.items())
        log(f"  {label}: {shown}")
    return samples


def timer(fn: Callable[[], object]) -> Callable[[], float]:
    """A contender that times the whole of `fn()`."""

    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return run


def medians(samples: Mapping[str, list[float]]) -> dict[str, float]:
    """The median of each contender's samples."""
    return {name: median(values) for name, values in samples.items()}


@contextmanager
def temp_dir() -> Iterator[Path]:
    """A temporary directory, removed with everything in it afterwards."""
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-") as name:
        yield Path(name)


def fresh_path(directory: Path, stem: str = "db") -> Path:
    """A path, in `directory`, that no database has used yet."""
    return directory / f"{stem}-{next(_names)}.sqlite"


def remove_db(path: Path) -> None:
    """Delete a database file and its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextmanager
def scratch_db(directory: Path, stem: str = "db") -> Iterator[Path]:
    """A fresh database path, deleted (with its WAL) when the block ends."""
    path = fresh_path(directory, stem)
    try:
        yield path
    finally:
        remove_db(path)


def create_store_db(path: Path) -> None:
    """Create an empty agentlog database (schema, WAL) by opening a store once and closing it."""

    async def create() -> None:
        store = SQLiteEventStore(path)
        await store.open()
        await store.close()

    asyncio.run(create())


def environment() -> dict[str, Any]:
    """Versions that matter to the numbers."""
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
    }


def emit(result: Mapping[str, Any]) -> None:
    """Print the result as exactly one JSON line on stdout."""
    print(json.dumps(dict(result), separators=(",", ":")), flush=True)


class CommitCounter:
    """Counts the store's write transactions by wrapping `events.sqlite._write_batch`."""

    def __init__(self) -> None:
        self.commits = 0
        self._real = sqlite_backend._write_batch

    def __enter__(self) -> CommitCounter:
        def counted(conn: sqlite3.Connection, batch: list[Any], *rest: Any) -> list[Any]:
            self.commits += 1
            return self._real(conn, batch, *rest)

        sqlite_backend._write_batch = counted
        return self

    def __exit__(self, *exc: object) -> None:
        sqlite_backend._write_batch = self._real
