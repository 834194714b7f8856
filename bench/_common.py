"""Shared benchmark plumbing: arguments, alternating rounds, medians, temp databases, output.

Every benchmark measures ours and its baseline in the same process, alternating them round
by round (A B A B ...) so that the noise of a shared machine hits both alike, and reports
medians. Each script prints exactly one JSON line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import itertools
import json
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentlog.events import SQLiteEventStore

_START = time.perf_counter()
_names = itertools.count(1)


def argument_parser(description: str) -> argparse.ArgumentParser:
    """A parser with `--quick` (smaller sizes) and `--rounds N` (default 5)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (seconds to about two minutes)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    return parser


def checked(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse the command line, refusing fewer than one round."""
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def parse_args(description: str) -> argparse.Namespace:
    """`--quick` (smaller sizes) and `--rounds N` (default 5)."""
    return checked(argument_parser(description))


def log(message: str) -> None:
    """A progress line on stderr, stamped with the seconds since start."""
    print(f"[{time.perf_counter() - _START:7.2f}s] {message}", file=sys.stderr, flush=True)


def median(samples: list[float]) -> float:
    """The median of a non-empty list of samples."""
    return statistics.median(samples)


def paired_ratio(a: list[float], b: list[float]) -> float:
    """The median of the per-round ratios a[i] / b[i] of two contenders that alternated.

    Rounds run side by side see the same machine, so pairing them cancels the drift of a
    shared machine that a ratio of the two medians keeps.
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired samples must be equally many and some: {len(a)} vs {len(b)}")
    return median([x / y for x, y in zip(a, b, strict=True)])


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


def machine() -> dict[str, Any]:
    """The machine absolute figures belong to: `os.uname()`, the CPU count and model."""
    uname = os.uname()
    model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "sysname": uname.sysname,
        "nodename": uname.nodename,
        "release": uname.release,
        "version": uname.version,
        "machine": uname.machine,
        "cpus": os.cpu_count(),
        "cpu_model": model,
    }


def now() -> str:
    """The date and time of the run (UTC, ISO 8601), for labelling absolute figures."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """Versions that matter to the numbers, and the machine and date they were taken on."""
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "machine": machine(),
        "date": now(),
    }


def emit(result: Mapping[str, Any]) -> None:
    """Print the result as exactly one JSON line on stdout."""
    print(json.dumps(dict(result), separators=(",", ":")), flush=True)


_LIBRARY = re.compile(r"^.*/(site-packages|lib/python3\.\d+)/")
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class CommitCounter:
    """Counts the transactions SQLite commits on every connection opened while it is active.

    It wraps `sqlite3.connect`, so each connection opened inside the block (a store's writer
    and readers, ownership claims) gets a trace callback; a commit is a COMMIT or END
    statement, or a write statement run outside a transaction (SQLite commits that one on
    its own). That counts what reached the database, whatever path the engine took to it.
    The callback costs something per statement (SQLite expands the bound values for it):
    count in untimed runs only. `commits` is the running total.
    """

    def __init__(self) -> None:
        self.commits = 0
        self.run_commits = 0  # what a caller measured of one run, for it to report
        self._real = sqlite3.connect
        self._lock = threading.Lock()

    def _saw(self, conn: sqlite3.Connection, sql: str) -> None:
        head = sql.lstrip()[:7].upper()
        if head.startswith(("COMMIT", "END")) or (
            head.startswith(_WRITES) and not conn.in_transaction
        ):
            with self._lock:
                self.commits += 1

    def __enter__(self) -> CommitCounter:
        real = self._real

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = real(*args, **kwargs)
            conn.set_trace_callback(lambda sql: self._saw(conn, sql))
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        sqlite3.connect = self._real


# Blocking waits: a thread with nothing to do (a worker waiting for work, the event loop
# waiting for a thread). Left out of the profile's lists; the loop's share is reported.
_WAITS = (
    "<method 'acquire' of '_thread.lock' objects>",
    "<method 'acquire' of '_thread.RLock' objects>",
    "<method 'poll' of 'select.epoll' objects>",
    "<method 'select' of 'select.epoll' objects>",
    "<method 'get' of '_queue.SimpleQueue' objects>",
    "<built-in method time.sleep>",
)
# Plumbing that wraps everything (the loop, thread start-up, executors): not informative in
# a list by cumulative time.
_PLUMBING = (
    "asyncio/",
    "threading.py",
    "concurrent/futures/",
    "selectors.py",
    "queue.py",
    "contextlib.py",
    "<method 'run' of '_contextvars.Context' objects>",
    "<built-in method builtins.exec>",
)


class ThreadProfiler:
    """cProfile over the calling thread and every thread started while it is active.

    Sync nodes, tools and SQLite run on threads, which a plain cProfile (one thread) misses;
    `threading.Thread.run` is wrapped so each new thread profiles itself, and the profiles
    are merged. Only threads started inside the block are seen, so use it in a fresh
    process (before any executor or connection thread exists) and in an untimed run.
    """

    def __init__(self) -> None:
        self._profiles: list[cProfile.Profile] = []
        self._main = cProfile.Profile()
        self._real_run = threading.Thread.run
        self.wall = 0.0
        self._start = 0.0

    def __enter__(self) -> ThreadProfiler:
        profiles, real_run = self._profiles, self._real_run

        def run(thread: threading.Thread) -> None:
            profile = cProfile.Profile()
            profiles.append(profile)
            profile.enable()
            try:
                real_run(thread)
            finally:
                profile.disable()

        threading.Thread.run = run  # type: ignore[method-assign,assignment]
        self._start = time.perf_counter()
        self._main.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        self._main.disable()
        self.wall = time.perf_counter() - self._start
        threading.Thread.run = self._real_run  # type: ignore[method-assign]

    def _stats(self) -> dict[tuple[str, int, str], list[Any]]:
        """Merged (file, line, name) -> [calls, own s, cumulative s, callers] over threads.

        A thread still running (an idle worker) is read as it stands: its open calls are
        not counted yet, which leaves out only the waits it is blocked in.
        """
        merged: dict[tuple[str, int, str], list[Any]] = {}
        for profile in [self._main, *self._profiles]:
            profile.snapshot_stats()  # reads what is recorded; does not touch another thread
            stats: dict[tuple[str, int, str], tuple[Any, ...]] = profile.stats
            for key, (_cc, nc, tt, ct, callers) in stats.items():
                entry = merged.setdefault(key, [0, 0.0, 0.0, set()])
                entry[0] += nc
                entry[1] += tt
                entry[2] += ct
                entry[3].update(callers)
        return merged

    def report(self, top: int = 10) -> dict[str, Any]:
        """The top entries by cumulative and by own time (waits and plumbing left out)."""
        merged = self._stats()
        root = str(Path(__file__).resolve().parents[1]) + "/"

        def name(key: tuple[str, int, str]) -> str:
            file, line, func = key
            if file == "~":
                return func
            file = _LIBRARY.sub("", file.removeprefix(root))
            return f"{file}:{line}({func})"

        def entry(key: tuple[str, int, str]) -> dict[str, Any]:
            calls, own, cumulative, _ = merged[key]
            return {
                "function": name(key),
                "cumulative_s": round(cumulative, 4),
                "own_s": round(own, 4),
                "calls": calls,
            }

        def waiting(key: tuple[str, int, str]) -> bool:
            return key[0] == "~" and key[2] in _WAITS

        def plumbing(key: tuple[str, int, str]) -> bool:
            label = name(key) if key[0] != "~" else key[2]
            callers = merged[key][3]
            thread_body = bool(callers) and all(c[0].endswith("threading.py") for c in callers)
            return thread_body or waiting(key) or any(p in label for p in _PLUMBING)

        by_cumulative = sorted(
            (k for k in merged if not plumbing(k)), key=lambda k: merged[k][2], reverse=True
        )
        by_own = sorted(
            (k for k in merged if not waiting(k)), key=lambda k: merged[k][1], reverse=True
        )
        busy = sum(v[1] for k, v in merged.items() if not waiting(k))
        main: dict[tuple[str, int, str], tuple[Any, ...]] = self._main.stats
        loop_wait = sum(v[2] for k, v in main.items() if k[0] == "~" and k[2] in _WAITS)
        return {
            "wall_s": round(self.wall, 4),
            "threads": 1 + len(self._profiles),
            "busy_s": round(busy, 4),
            "main_thread_waiting_s": round(loop_wait, 4),
            "note": "cProfile of one untimed run, all threads merged; cumulative and own "
            "seconds summed over threads; blocking waits left out of the lists (the main "
            "thread's are main_thread_waiting_s: the loop waiting for the writer and worker "
            "threads), and asyncio/threading/executor plumbing and each thread's own loop (which "
            "holds its waits) left out of top_cumulative",
            "top_cumulative": [entry(k) for k in by_cumulative[:top]],
            "top_own": [entry(k) for k in by_own[:top]],
        }


def spawn_ready(args: list[str], *, stdin: bool = False) -> subprocess.Popen[str]:
    """Start `python ARGS` (with the project and bench/ importable) and wait for it to
    print "ready"; a process that prints anything else is killed and reported."""
    here = Path(__file__).resolve().parent
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{here.parent}:{here}"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise RuntimeError(f"{args} did not start: {line!r}")
    return proc
