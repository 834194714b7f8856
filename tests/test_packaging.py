"""What a wheel carries: every subpackage of the source tree (a package left out of
pyproject's list is missing from an installed agentlog, though an editable one works), and
the viewer's files."""

from __future__ import annotations

import tomllib

from tests.helpers import ROOT


def test_every_subpackage_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        "agentlog." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("actors", "events", "projections")
        for init in (ROOT / top).rglob("__init__.py")
        if "node_modules" not in init.parts
    }
    assert found - listed == set()
    assert config["package-data"]["agentlog.actors.http.ui"] == ["static/*", "swagger/*"]
    assert (ROOT / "actors" / "http" / "ui" / "static" / "app.js").exists()
    assert (ROOT / "actors" / "http" / "ui" / "swagger" / "swagger-ui-bundle.js").exists()
