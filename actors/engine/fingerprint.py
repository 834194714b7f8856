"""A graph's fingerprint: what `run_started` records of the code that ran the run.

The fingerprint names the graph's nodes with a hash of each one's code, its edges, its
conditions (with their code and path maps), its tools with a hash of each schema and of
each tool's code, and its breakpoints; `hash` covers all of it. Two processes loading the
same source compute the same fingerprint (line numbers and file paths are left out, so
moving code does not change it). `changed_parts` says which parts differ between two, in
words a report shows; a resume of a run that began under another fingerprint applies the
caller's `on_code_change` policy (`code_change`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import types
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from agentlog.actors.engine.errors import GraphError

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph
    from agentlog.actors.engine.run import Engine

__all__ = [
    "CODE_CHANGE_POLICIES",
    "CodeChangePolicy",
    "CodeChangedError",
    "changed_parts",
    "code_change",
    "code_hash",
    "graph_fingerprint",
]

CodeChangePolicy = Literal["warn", "refuse", "allow"]
CODE_CHANGE_POLICIES: tuple[str, ...] = ("warn", "refuse", "allow")
DEFAULT_POLICY: CodeChangePolicy = "warn"
CODE_CHANGE_KEY = "on_code_change"
"""The config key of a call's policy (`ainvoke(..., on_code_change=...)` sets it)."""
HASH_CHARS = 16
"""Hex characters kept of each SHA-256: enough to tell versions of one graph apart."""


class CodeChangedError(GraphError):
    """A paused run was resumed under code other than the code it began under, and the
    call's `on_code_change` policy is "refuse": nothing was written."""

    def __init__(self, thread_id: str, parts: list[str]) -> None:
        self.thread_id = thread_id
        self.parts = parts
        shown = "; ".join(parts[:8]) + (f" (+{len(parts) - 8} more)" if len(parts) > 8 else "")
        super().__init__(
            f"thread {thread_id!r} began its run under other code ({shown}), and the "
            "policy is on_code_change='refuse': nothing was written. Check the change with "
            "`agentlog replay-test`, then resume with on_code_change='warn' or 'allow', or "
            "cancel the run"
        )


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def _code_parts(code: types.CodeType) -> list[Any]:
    """What a code object does, without where it sits: bytecode, names, constants (nested
    code objects folded in the same way)."""
    consts = [_code_parts(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), list(code.co_names), list(code.co_varnames), consts]


def code_hash(obj: Any) -> str:
    """A hash of what `obj` runs: a function's code, a bound method's, a partial's function
    and arguments; an object's class code and its `fingerprint()` when it has one (a
    `ModelNode` or a `ToolNode` says what it sends and calls)."""
    return _digest(_describe(obj, depth=0))


def _describe(obj: Any, depth: int) -> Any:
    if depth > 4:
        return type(obj).__qualname__
    if isinstance(obj, functools.partial):
        return ["partial", _describe(obj.func, depth + 1), repr(obj.args), repr(obj.keywords)]
    if isinstance(obj, types.MethodType):
        return ["method", _describe(obj.__func__, depth + 1)]
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType):
        cells = [_cell(c, depth) for c in getattr(obj, "__closure__", None) or ()]
        return ["code", _code_parts(code), cells] if cells else ["code", _code_parts(code)]
    own = getattr(obj, "fingerprint", None)
    parts: list[Any] = ["object", type(obj).__qualname__]
    if callable(own) and not inspect.isclass(obj):
        parts.append(own())
    for method in ("__call__", "run"):
        found = inspect.getattr_static(type(obj), method, None)
        if isinstance(getattr(found, "__code__", None), types.CodeType):
            parts.append(_describe(found, depth + 1))
    script = getattr(obj, "script", None)  # a scripted model: its script is its code
    if script is not None:
        parts.append(_describe(script, depth + 1) if callable(script) else _stable(script))
    return parts


def _cell(cell: Any, depth: int) -> Any:
    """A closure's captured function by its code; any other captured value by its type
    alone. A captured value is configuration (a path, a port, a prompt handed to a node
    factory), often other in each process: counting it as code would make every restart a
    code change. What it changes shows in the replay as the node's output or its request."""
    try:
        value = cell.cell_contents
    except ValueError:  # not bound yet
        return None
    if callable(value):
        return _describe(value, depth + 1)
    return type(value).__qualname__


UNSTABLE = frozenset({"message_id", "id", "timestamp"})
"""Keys left out of a value's description: fresh for each process that builds it."""


def _stable(value: Any) -> Any:
    """`value` as JSON without the ids and timestamps made fresh when it was built."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items() if k not in UNSTABLE}
    if isinstance(value, list | tuple):
        return [_stable(v) for v in value]
    return value if isinstance(value, str | int | float | bool | None) else repr(value)


def _tools_of(node: Any) -> Mapping[str, Any]:
    tools = getattr(node, "tools", None)
    return tools if isinstance(tools, dict) else {}


def _tool_entry(tool: Any) -> dict[str, str]:
    try:
        schema = tool.schema()
    except Exception as exc:  # a tool that cannot describe itself still has a fingerprint
        schema = f"unavailable: {type(exc).__name__}"
    return {"schema": _digest(schema), "code": code_hash(getattr(tool, "fn", tool))}


def graph_fingerprint(
    graph: StateGraph[Any],
    interrupt_before: frozenset[str] = frozenset(),
    interrupt_after: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The fingerprint of `graph` as compiled with these breakpoints (plain JSON)."""
    nodes: dict[str, str] = {}
    tools: dict[str, dict[str, str]] = {}
    for name, node in graph.nodes.items():
        nodes[name] = code_hash(node)
        for tool_name, tool in _tools_of(node).items():
            tools[f"{name}.{tool_name}"] = _tool_entry(tool)
    model_tools = {
        f"{name}.{t.get('function', t).get('name', '?')}": {"schema": _digest(t)}
        for name, node in graph.nodes.items()
        for t in _model_tools(node)
    }
    conditions = {
        source: {
            "code": code_hash(branch.condition),
            "paths": (
                None
                if branch.path_map is None
                else {str(k): v for k, v in sorted(branch.path_map.items(), key=str)}
            ),
        }
        for source, branch in graph.branches.items()
    }
    edges: list[list[Any]] = [[s, t] for s, t in graph.edges.items()]
    edges += [[s, t] for s, targets in graph.fanout.items() for t in targets]
    edges += [[list(sources), t] for t, sources in graph.joins.items()]
    body: dict[str, Any] = {
        "nodes": nodes,
        "edges": edges,
        "conditions": conditions,
        "tools": {**model_tools, **tools},
        "interrupt_before": sorted(interrupt_before),
        "interrupt_after": sorted(interrupt_after),
    }
    return {"hash": _digest(body), **body}


def _model_tools(node: Any) -> list[dict[str, Any]]:
    """The tool schemas a model node sends (a `ModelNode`'s `tools`, as a list)."""
    tools = getattr(node, "tools", None)
    return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []


def changed_parts(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What differs between two fingerprints, one line each ("node 'agent': code changed",
    "edge lookup -> agent removed"); empty when they are the same or `old` is unknown."""
    if not old or old.get("hash") == new.get("hash"):
        return []
    out: list[str] = []
    out += _dict_changes("node", old.get("nodes") or {}, new.get("nodes") or {}, "code")
    out += _dict_changes("condition after", old.get("conditions") or {}, new["conditions"], "")
    out += _tool_changes(old.get("tools") or {}, new.get("tools") or {})
    old_edges = {json.dumps(e) for e in old.get("edges") or []}
    new_edges = {json.dumps(e) for e in new.get("edges") or []}
    out += [f"edge {_edge(e)} removed" for e in sorted(old_edges - new_edges)]
    out += [f"edge {_edge(e)} added" for e in sorted(new_edges - old_edges)]
    if old_edges == new_edges and old.get("edges") != new.get("edges"):
        out.append("edges declared in another order")
    for key in ("interrupt_before", "interrupt_after"):
        if old.get(key) != new.get(key):
            out.append(f"{key} {old.get(key)} -> {new.get(key)}")
    return out or ["the graph's fingerprint changed"]


def _edge(encoded: str) -> str:
    source, target = json.loads(encoded)
    return f"{source} -> {target}"


def _dict_changes(what: str, old: Mapping[str, Any], new: Mapping[str, Any], of: str) -> list[str]:
    out = [f"{what} {k!r} removed" for k in old if k not in new]
    out += [f"{what} {k!r} added" for k in new if k not in old]
    for key in old:
        if key in new and old[key] != new[key]:
            detail = f"{of} changed" if of else _which(old[key], new[key])
            out.append(f"{what} {key!r}: {detail}")
    return out


def _which(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = [k for k in sorted({*old, *new}) if old.get(k) != new.get(k)]
        return ", ".join(f"{k} changed" for k in keys) or "changed"
    return "changed"


def _tool_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return _dict_changes("tool", old, new, "")


def code_change(
    engine: Engine[Any],
    thread_id: str,
    started: Mapping[str, Any] | None,
    policy: object,
) -> dict[str, Any] | None:
    """Apply `policy` to a resume of a run begun under fingerprint `started`: None when the
    code is the same (or the run recorded none); else what the `resumed` record keeps
    (policy, fingerprint hashes, changed parts), after a warning ("warn"); `CodeChangedError`
    for "refuse", raised before anything is written."""
    chosen = check_policy(policy)
    now = engine.fingerprint
    parts = changed_parts(started, now)
    if not parts or started is None:
        return None
    if chosen == "refuse":
        raise CodeChangedError(thread_id, parts)
    if chosen == "warn":
        warnings.warn(
            f"thread {thread_id!r} resumes under other code than its run began with: "
            + "; ".join(parts[:5]),
            CodeChangeWarning,
            stacklevel=2,
        )
    return {"policy": chosen, "from": started.get("hash"), "to": now["hash"], "changed": parts}


class CodeChangeWarning(UserWarning):
    """A paused run resumed under code other than the code it began under."""


def check_policy(policy: object) -> CodeChangePolicy:
    """`policy` as a policy name; `GraphError` naming the choices otherwise."""
    if policy is None:
        return DEFAULT_POLICY
    if policy not in CODE_CHANGE_POLICIES:
        raise GraphError(
            f"on_code_change must be one of {', '.join(CODE_CHANGE_POLICIES)}, got {policy!r:.40}"
        )
    return policy  # type: ignore[return-value]
