"""One mechanism loads every package's names on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentlog.lazy import LazyExports


def test_a_name_is_imported_once_then_kept_and_an_unknown_one_refused() -> None:
    namespace: dict[str, object] = {}
    lazy = LazyExports("agentlog.events", {"dumps": "json", "Head": ".audit"}, namespace)
    assert lazy.names() == ["Head", "dumps"]
    import json

    from agentlog.events.audit import Head

    assert lazy.load("dumps") is json.dumps and lazy.load("Head") is Head
    assert namespace == {"dumps": json.dumps, "Head": Head}
    with pytest.raises(AttributeError, match=r"module 'agentlog\.events' has no attribute 'nope'"):
        lazy.load("nope")


def test_every_package_loads_its_names_through_it() -> None:
    code = (
        "import sys, agentlog, agentlog.actors, agentlog.events, agentlog.actors.testing as t\n"
        "assert 'agentlog.actors.engine.graph' not in sys.modules\n"
        "assert 'StateGraph' in dir(agentlog) and 'until' in dir(t)\n"
        "assert 'PostgresEventStore' in dir(agentlog.events)\n"
        "from agentlog import StateGraph\n"
        "assert agentlog.actors.StateGraph is StateGraph\n"
        "assert t.until.__module__ == 'agentlog.actors.testing.waiting'\n"
        "for package in (agentlog, agentlog.actors, agentlog.events, t):\n"
        "    try:\n"
        "        package.nope\n"
        "    except AttributeError as exc:\n"
        "        assert repr(package.__name__) in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(package)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
