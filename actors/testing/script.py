"""The steps of a graph state machine's failure, written out as a pytest test to paste.

Each rule the machine runs leaves a `Step`: the line a person reads (`said`) and the code that
does the same to a thread (`main`; `shadow` too when the shadow, the thread never crashed,
did something else). `Script.render` turns the steps into a test that builds the app with
the user's factory, replays them, and checks the invariant that broke: the user's (called
on the state), the differential one (the thread replayed with its crashes and without, the
states compared as the machine compares them), or the log's (`assert_replays`). The test
is sync (it runs its own loop), so it needs no async plugin.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

Broken = Literal["user", "shadow", "log"]
"""Which kind of invariant broke: the user's own, the differential one, or the log's."""

__all__ = ["Broken", "Script", "Step"]


@dataclass(frozen=True)
class Step:
    """One rule as it happened: what a person reads, and the code that does it again."""

    said: str
    main: tuple[str, ...]
    shadow: tuple[str, ...] | None = None
    """What the shadow did, when it differs from `main` (None: the same)."""


class Script:
    """Writes code for a machine's steps: values as Python, names imported where they live."""

    def __init__(self, machine: type[Any]) -> None:
        self.machine = machine
        self.kind = getattr(machine, "store_kind", "memory")
        self.imports: dict[str, set[str]] = {}
        self.modules: set[str] = set()
        self.missing: list[str] = []
        self.build = "build"

    # ---- names --------------------------------------------------------------------------

    def need(self, module: str, name: str) -> str:
        """Import `name` from `module`; the name to write."""
        self.imports.setdefault(module, set()).add(name)
        return name

    def ref(self, obj: Any, what: str) -> str:
        """How the test names `obj` (a function or a class of the user's): imported from its
        module when that works, or a placeholder the test says to fill in."""
        found = _importable(obj)
        if found is not None:
            module, qualname = found
            head = qualname.split(".")[0]
            self.need(module, head)
            return qualname
        name = re.sub(r"\W", "_", getattr(obj, "__name__", what)) or what
        self.missing.append(f"{name}: {what} {obj!r:.60} is not importable by name")
        return name

    def _build_expr(self, factory: Any) -> str:
        graph = getattr(factory, "graph", None)
        if graph is not None:  # a StateGraph the machine compiles on each store
            return f"{self.ref(graph, 'your StateGraph')}.compile"
        if factory is None:
            return "build"
        return self.ref(factory, "your factory build(store)")

    # ---- values -------------------------------------------------------------------------

    def value(self, value: Any) -> str:
        """`value` as Python source that builds it again."""
        if value is None or isinstance(value, bool | int | str | bytes):
            return repr(value)
        if isinstance(value, float):
            if math.isnan(value):
                return "float('nan')"
            if math.isinf(value):
                return "float('inf')" if value > 0 else "-float('inf')"
            return repr(value)
        if isinstance(value, list):
            return "[" + ", ".join(self.value(v) for v in value) + "]"
        if isinstance(value, tuple):
            inner = ", ".join(self.value(v) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if isinstance(value, dict):
            pairs = ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in value.items())
            return "{" + pairs + "}"
        if isinstance(value, BaseModel):
            cls = self.ref(type(value), "a model class")
            full = value.model_dump(mode="json")
            kept = value.model_dump(mode="json", exclude_defaults=True)
            return f"{cls}.model_validate({self.value({k: full[k] for k in kept})})"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = self.ref(type(value), "a dataclass")
            fields = [
                f"{f.name}={self.value(getattr(value, f.name))}"
                for f in dataclasses.fields(value)
                if f.init and getattr(value, f.name) != f.default
            ]
            return f"{cls}({', '.join(fields)})"
        return repr(value)

    # ---- steps --------------------------------------------------------------------------

    def call(self, expr: str, failed: str | None = None) -> tuple[str, ...]:
        """`await expr`, inside a suppress when it ended in a typed error (`failed`)."""
        if failed is None:
            return (f"await {expr}",)
        return (
            f"with contextlib.suppress(AgentlogError):  # it ended in {failed}",
            f"    await {expr}",
        )

    def reopen(self) -> str:
        """The `restart` arguments after the store: how the store is opened again."""
        if self.kind == "sqlite":
            return ", lambda: SQLiteEventStore(path)"
        return ""

    # ---- the test -----------------------------------------------------------------------

    def render(
        self, steps: Sequence[Step], broken: Broken, check: Callable[..., Any] | None = None
    ) -> str:
        """The test: the steps replayed on a fresh store, then the broken invariant."""
        name = re.sub(r"\W+", "_", getattr(self.machine, "__name__", "machine")).lower()
        self.build = self._build_expr(getattr(self.machine, "factory", None))
        differential = broken == "shadow"
        self.need("agentlog.actors.testing", "FaultyStore")
        if self.kind == "sqlite":
            self.need("agentlog.events", "SQLiteEventStore")
            path = 'tmp_path / f"log-{crashes}.db"' if differential else 'tmp_path / "log.db"'
            opening = ["path = " + path, 'store = FaultyStore(SQLiteEventStore(path), "t")']
        else:
            self.need("agentlog.events", "MemoryEventStore")
            opening = ['store = FaultyStore(MemoryEventStore(), "t")']
        body = [*opening, f"app = {self.build}(store)", 'config = {"thread_id": "t"}']
        body.append("try:")
        for step in steps:
            if differential and step.shadow is not None:
                lines = ["if crashes:", *_indent(step.main), "else:", *_indent(step.shadow)]
            else:
                lines = list(step.main)
            restart = f"restart({self.build}, "
            body.extend(_indent([line.replace("restart(build, ", restart) for line in lines]))
        if broken == "log":
            checker = self.need("agentlog.actors.testing", "assert_replays")
            body.append(f'    return await {checker}(app, config["thread_id"])')
        else:
            body.append("    return await app.aget_state(config)")
        body += ["finally:", "    await store.close()"]
        used = "\n".join(body)
        for module, helper, sign in _HELPERS:
            if sign in used:
                self.need(module, helper)
        for module in ("contextlib", "pytest"):
            if f"{module}." in used:
                self.modules.add(module)
        outer: list[str] = []
        arguments = "crashes: bool" if differential else ""
        outer.append(f"async def thread({arguments}):")
        outer.extend(_indent(body))
        outer.append("")
        if differential:
            same = self.need("agentlog.actors.testing", "comparable")
            outer += [
                "crashed = asyncio.run(thread(crashes=True))",
                "calm = asyncio.run(thread(crashes=False))",
                f"assert {same}(crashed) == {same}(calm)  # ids and times aside",
            ]
        elif broken == "user" and check is not None:
            rule = self.ref(check, "your invariant")
            outer += ["state = asyncio.run(thread())", f"assert {rule}(state) is not False"]
        else:
            outer.append("asyncio.run(thread())")
        self.modules.add("asyncio")
        fixture = "tmp_path" if self.kind == "sqlite" else ""
        lines = [*self._import_lines(), "", ""]
        lines += [f"def test_{name}_counterexample({fixture}) -> None:", *_indent(outer)]
        return "\n".join(lines) + "\n"

    def _import_lines(self) -> list[str]:
        lines = [f"import {m}" for m in sorted(self.modules)]
        if lines:
            lines.append("")
        for module in sorted(self.imports):
            names = ", ".join(sorted(self.imports[module]))
            lines.append(f"from {module} import {names}")
        lines += [f"# fill in {note}" for note in self.missing]
        return lines


_HELPERS = [
    ("agentlog.actors.testing", "restart", "restart("),
    ("agentlog.actors.testing", "paused_at", "paused_at("),
    ("agentlog.actors", "ThreadBusyError", "ThreadBusyError"),
    ("agentlog.events.errors", "AgentlogError", "AgentlogError"),
]
"""What a step's code may use, and the text that shows it does."""


def _indent(lines: Sequence[str]) -> list[str]:
    return [f"    {line}" if line else line for line in lines]


def _importable(obj: Any) -> tuple[str, str] | None:
    """(module, qualified name) that import `obj` again, looking through the package's
    public names first (`from projections import Message`), or None."""
    module = str(getattr(obj, "__module__", None) or "__main__")
    qualname = str(getattr(obj, "__qualname__", None) or "<unnamed>")
    if "<" not in qualname and module != "__main__":
        top = module.split(".")[0]
        for candidate in (top, module) if "." not in qualname else (module,):
            if _resolves(candidate, qualname, obj):
                return candidate, qualname
    return _global_of(obj)


def _resolves(module: str, qualname: str, obj: Any) -> bool:
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return False
    return target is obj


def _global_of(obj: Any) -> tuple[str, str] | None:
    """A module-level name bound to `obj` in an already imported module of the user's (say
    the test module that built a `StateGraph`), or None."""
    for name, module in list(sys.modules.items()):
        path = str(getattr(module, "__file__", "") or "")
        if (
            name == "__main__"
            or not path
            or "site-packages" in path
            or path.startswith(sys.base_prefix)
        ):
            continue
        for attribute, value in list(vars(module).items()):
            if value is obj and not attribute.startswith("_"):
                return name, attribute
    return None
