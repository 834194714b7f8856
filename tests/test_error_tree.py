"""Every error a user can cause derives from `AgentlogError`, so one `except` catches them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from agentlog import actors, events, projections
from agentlog.events import AgentlogError, InvalidArgumentError

STANDALONE = {"agentlog.events.verify_export"}
"""The export verifier runs on the standard library alone, outside the package's tree."""


def exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for package in (actors, events, projections):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name in STANDALONE or info.name.endswith(".testing"):
                continue
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ == module.__name__ and issubclass(cls, BaseException):
                    found.append(cls)
    return found


def test_every_error_class_of_the_package_is_an_agentlog_error() -> None:
    classes = exception_classes()
    assert len(classes) > 30
    control = {"ControlSignal", "GraphInterrupt"}  # pauses a run; not an error
    outside = [
        f"{c.__module__}.{c.__name__}"
        for c in classes
        if c.__name__ not in control and not issubclass(c, AgentlogError | Warning)
    ]  # a warning (CodeChangeWarning) is no error: it goes through `warnings`
    assert outside == []


@pytest.mark.parametrize(
    "call",
    [
        lambda: projections.RemoveMessage(),
        lambda: events.Head("", 1, "0" * 64),
        lambda: projections.MessageContextManager(max_messages=-1),
    ],
)
def test_bad_arguments_raise_invalid_argument_error(call: object) -> None:
    with pytest.raises(InvalidArgumentError):
        call()  # type: ignore[operator]
