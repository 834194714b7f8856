"""pytest form of replay tests: a folder of exported threads (`agentlog export`), one test
each, replayed under the code of the working tree.

    @pytest.mark.replay_threads(app="myapp.graph:build", exports="tests/threads")
    def test_production_threads(replayed_thread):
        pass  # the fixture fails the test, naming the divergence, when one is found

`ignore=[...]` and `may_differ=[...]` in the marker are `Allowed`'s fields. Loaded through the
`pytest11` entry point; agentlog loads only when a test asks for `replayed_thread`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

MARKER = "replay_threads"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(app, exports, ignore=(), may_differ=()): replay each exported thread of "
        "the folder `exports` under the graph `app` (module:attribute, or the object)",
    )


def _marker(node: Any) -> pytest.Mark:
    found = node.get_closest_marker(MARKER)
    if found is None or "exports" not in found.kwargs or "app" not in found.kwargs:
        raise pytest.UsageError(
            f"replayed_thread needs @pytest.mark.{MARKER}(app='module:graph', exports='folder')"
        )
    return found  # type: ignore[no-any-return]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "replayed_thread" not in metafunc.fixturenames:
        return
    from agentlog.actors.replay.api import _export_files

    folder = _marker(metafunc.definition).kwargs["exports"]
    files = _export_files([Path(folder)])
    metafunc.parametrize("replayed_thread", files, ids=[f.stem for f in files], indirect=True)


@pytest.fixture
def replayed_thread(request: pytest.FixtureRequest) -> Any:
    """The replay of one exported thread (a `ThreadResult`); a divergence fails the test
    once its body has run."""
    from agentlog.actors.replay import Allowed, load_app, read_export, replay_records
    from agentlog.actors.testing.plugin import _finish

    marker = _marker(request.node)
    app = marker.kwargs["app"]
    target = load_app(app) if isinstance(app, str) else app
    allowed = Allowed.of(marker.kwargs.get("ignore", ()), marker.kwargs.get("may_differ", ()))
    return _finish(replay_records(target, read_export(request.param), allowed))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """After a test that used `replayed_thread`: a divergence fails it, with the report."""
    outcome = yield
    result: Any = getattr(item, "funcargs", {}).get("replayed_thread")
    if getattr(result, "status", None) == "diverged":
        from agentlog.actors.replay import ReplayReport

        pytest.fail(ReplayReport([result]).render(), pytrace=False)
    return outcome
