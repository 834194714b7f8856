"""The 600-line budget of a module, kept by `make lint`.

A module of the packages (`actors/`, `events/`, `projections/`, `agentlog/`) has at most
`BUDGET` lines, or is listed in `tools/line_budget.txt` with the most lines it may have: the
list only shrinks. A listed module that grew fails; one that shrank, or fell under the budget,
fails until the list says so, so the list stays the truth.

    python tools/line_budget.py           # check
    python tools/line_budget.py --update  # rewrite the list from the tree (after a split)
"""

from __future__ import annotations

import sys
from pathlib import Path

BUDGET = 600
ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tools" / "line_budget.txt"
PACKAGES = ("actors", "events", "projections", "agentlog")


def sizes() -> dict[str, int]:
    """Each module of the packages and its line count."""
    found: dict[str, int] = {}
    paths = [path for package in PACKAGES[:-1] for path in (ROOT / package).rglob("*.py")]
    paths += (ROOT / "agentlog").glob("*.py")  # its folders are links to the three above
    for path in sorted(paths):
        found[str(path.relative_to(ROOT))] = len(path.read_text().splitlines())
    return found


def allowed() -> dict[str, int]:
    """The listed exceptions: module path and the most lines it may have."""
    listed: dict[str, int] = {}
    for line in LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            count, path = line.split(maxsplit=1)
            listed[path] = int(count)
    return listed


def problems(found: dict[str, int], listed: dict[str, int]) -> list[str]:
    """What breaks the budget, one line each, naming the fix."""
    out: list[str] = []
    for path, lines in sorted(found.items()):
        limit = listed.get(path)
        if limit is None and lines > BUDGET:
            out.append(f"{path}: {lines} lines, over the {BUDGET}-line budget: split it")
        elif limit is not None and lines > limit:
            out.append(f"{path}: {lines} lines, more than its listed {limit}: split it")
        elif limit is not None and lines < limit:
            out.append(
                f"{path}: {lines} lines, under its listed {limit}: lower the list "
                "(python tools/line_budget.py --update)"
            )
    for path in sorted(set(listed) - set(found)):
        out.append(f"{path}: listed but gone: drop it (python tools/line_budget.py --update)")
    return out


def update(found: dict[str, int]) -> None:
    over = {path: lines for path, lines in found.items() if lines > BUDGET}
    body = "".join(f"{lines} {path}\n" for path, lines in sorted(over.items()))
    LIST.write_text(
        f"# Modules over the {BUDGET}-line budget, with the most lines each may keep.\n"
        "# This list only shrinks: split a module, then run tools/line_budget.py --update.\n" + body
    )


def main(argv: list[str]) -> int:
    found = sizes()
    if "--update" in argv:
        update(found)
        return 0
    listed = allowed()
    found_problems = problems(found, listed)
    for problem in found_problems:
        print(problem)
    over = sum(1 for lines in found.values() if lines > BUDGET)
    print(f"{len(found)} modules, {over} over {BUDGET} lines (listed: {len(listed)})")
    return 1 if found_problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
