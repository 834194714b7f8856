"""Names a package imports on first use (PEP 562): one mechanism for every package that
keeps `import` cheap or an optional dependency out of the way."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


class LazyExports:
    """The public names of package `package` that live in other modules (`homes`: name to
    module, relative to the package when it starts with "."), imported when first asked for
    and then kept in the package's `namespace`, so later lookups skip the package's
    `__getattr__`.

    A package delegates to it::

        _lazy = LazyExports(__name__, _HOMES, globals())


        def __getattr__(name: str) -> Any:
            return _lazy.load(name)


        def __dir__() -> list[str]:
            return _lazy.names()
    """

    def __init__(self, package: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> None:
        self.package = package
        self.homes = homes
        self.namespace = namespace

    def load(self, name: str) -> Any:
        """The value of `name`, imported from its module; AttributeError for a name not here."""
        home = self.homes.get(name)
        if home is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, self.package), name)
        self.namespace[name] = value
        return value

    def names(self) -> list[str]:
        """The package's attributes with the names not imported yet."""
        return sorted({*self.namespace, *self.homes})
