"""Instructions per durable step, counted by callgrind: a figure a busy machine does not move.

Runs the def-tool agent loop of bench/workload.py durable on SQLite under `valgrind
--tool=callgrind` twice, with N + BASE steps and with BASE steps, each in a fresh process,
and reports (instructions(N + BASE) - instructions(BASE)) / N: the cost of one step with the
process start, the imports and the store's open taken out. Wall-clock benchmarks on a
shared 2-core machine move 2x between runs; this count repeats to within a fraction of a
percent for the same code and inputs, so it says whether a change made a step cheaper.

Usage: .venv/bin/python bench/instructions.py [--quick] [--n N] [--variant def-tool]
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import argument_parser, emit, environment, log
from workload import VARIANTS, run_loop

BASE = 20
"""Steps of the short run whose count is taken away (the start, the open, a first step)."""

_TOTALS = re.compile(r"^(?:summary|totals):\s*(\d+)", re.MULTILINE)


def counted(steps: int, variant: str, scratch: Path) -> int:
    """Instructions a fresh process spends running `steps` steps of the loop (callgrind)."""
    out = scratch / f"callgrind.{steps}.out"
    db = scratch / f"loop-{steps}.db"
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--run",
        str(steps),
        "--variant",
        variant,
        "--db",
        str(db),
    ]
    subprocess.run(command, check=True, capture_output=True)
    found = _TOTALS.search(out.read_text())
    if found is None:
        raise RuntimeError(f"no totals in {out}")
    return int(found.group(1))


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=None, help="measured steps (default 1000)")
    parser.add_argument("--variant", default="def-tool", choices=VARIANTS)
    parser.add_argument("--run", type=int, help="(internal) run this many steps and exit")
    parser.add_argument("--db", help="(internal) with --run")
    args = parser.parse_args()
    if args.run is not None:
        asyncio.run(run_loop(args.db, args.variant, args.run, "t"))
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install -y valgrind)")
    n = args.n or (300 if args.quick else 1000)
    with tempfile.TemporaryDirectory() as scratch:
        log(f"callgrind: {BASE} steps")
        short = counted(BASE, args.variant, Path(scratch))
        log(f"callgrind: {n + BASE} steps")
        long = counted(n + BASE, args.variant, Path(scratch))
    emit(
        {
            "bench": "instructions",
            "variant": args.variant,
            "steps": n,
            "instructions_per_step": round((long - short) / n),
            "instructions_short_run": short,
            "instructions_long_run": long,
            **environment(),
        }
    )


if __name__ == "__main__":
    main()
