"""The viewer at /ui in a real browser: Debian's Chromium driven by Playwright, against a
real `agentlog serve` on a loopback port, on a database `agentlog demo` wrote.

One browser and one server for the module. Each page is scanned by axe-core (from the npm
registry, tests/viewer/package.json): no serious or critical violation. Screenshots of each
view go to tests/viewer/screenshots/ (the README names it)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlog.actors.http.tokens import hash_token
from agentlog.actors.testing import until_blocking
from tests.helpers import ROOT, edit_db
from tests.test_cli_serve import start

try:
    from playwright.sync_api import Browser, Page, Route, expect, sync_playwright
except ImportError:  # required in `make test` (AGENTLOG_PEERS=required), skipped elsewhere
    if os.environ.get("AGENTLOG_PEERS") == "required":
        raise
    pytest.skip("the viewer's test needs playwright (the dev extra)", allow_module_level=True)

CHROMIUM = Path("/usr/bin/chromium")
VIEWER = ROOT / "tests" / "viewer"
SHOTS = VIEWER / "screenshots"
APP = "tests.viewer.app:build"
WAIT_MS = 30_000
"""How long a page may take to show what a test waits for (a failure guard only)."""
HOSTILE = (
    "<img src=x onerror=window.__pwned=1> \x1b[31mred\x1b[0m [a link](javascript:alert(1))"
    " \u202egnp.exe"  # a bidi override would show "exe.png"
)


def missing(why: str) -> None:
    if os.environ.get("AGENTLOG_PEERS") == "required":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def axe() -> str:
    """axe-core's script, installed from the npm registry by tests/viewer/package.json."""
    script = VIEWER / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        if npm is None:
            missing("npm is needed to install axe-core for the viewer's accessibility scan")
        installed = subprocess.run(
            [str(npm), "install", "--no-audit", "--no-fund"],
            cwd=VIEWER, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr[-2000:]
    return script.read_text()


def demo(db: Path) -> str:
    """`agentlog demo` writes its thread into `db`; its id."""
    made = subprocess.run(
        [sys.executable, "-c", "from agentlog.actors.cli import main; main()",
         "demo", "--db", str(db), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    return str(json.loads(made.stdout)["thread_id"])


def stop(proc: subprocess.Popen[str]) -> None:
    """Stop a server: a drain, and a second signal (which cancels runs still going) if the
    drain does not end it."""
    proc.terminate()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """A server on a database holding the demo's thread: its url, database and thread id."""
    db = tmp_path_factory.mktemp("viewer") / "viewer.db"
    thread = demo(db)
    proc, url = start(db, app=APP)
    try:
        yield url, db, thread
    finally:
        stop(proc)


TOKENS = {"ops": ["read", "run", "edit"], "reader": ["read"]}
"""The tokens of the server with tokens: each one's name is its secret too."""


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A server with tokens (`TOKENS`) on a database holding the demo's thread: its url and
    the thread's id."""
    folder = tmp_path_factory.mktemp("guarded")
    thread = demo(folder / "guarded.db")
    entries = [
        {"name": name, "sha256": hash_token(name), "graphs": ["*"], "rights": rights}
        for name, rights in TOKENS.items()
    ]
    (folder / "tokens.json").write_text(json.dumps({"tokens": entries}))
    proc, url = start(folder / "guarded.db", "--tokens", str(folder / "tokens.json"), app=APP)
    try:
        yield url, thread
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        missing("Debian's Chromium is needed (apt-get install -y chromium; .ci/run installs it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield launched
        finally:
            launched.close()


@contextlib.contextmanager
def opened(browser: Browser, url: str) -> Iterator[Page]:
    """A page of a fresh browser context on `url`, failing the test on a script error."""
    context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()
    assert not errors, errors


@pytest.fixture
def page(browser: Browser, served: tuple[str, Path, str]) -> Iterator[Page]:
    with opened(browser, served[0]) as fresh:
        yield fresh


@pytest.fixture
def guarded_page(browser: Browser, guarded: tuple[str, str]) -> Iterator[Page]:
    with opened(browser, guarded[0]) as fresh:
        yield fresh


def show(page: Page, path: str) -> None:
    answer = page.goto(path)
    assert answer is not None
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    page.wait_for_selector("body[data-ready]")


def scan(page: Page, axe: str, shot: str) -> None:
    """No serious accessibility violation on the page; its screenshot saved."""
    page.evaluate(axe)  # evaluated by the browser's devtools: the page's CSP stays strict
    found: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations
            .filter((v) => v.impact === "serious" || v.impact === "critical")
            .map((v) => ({id: v.id, nodes: v.nodes.map((n) => n.target.join(" "))}))"""
    )
    assert found == [], found
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)


def run(url: str, thread: str, text: str) -> dict[str, Any]:
    """A run of the support graph over the HTTP API, until it ends or pauses."""
    with httpx.Client(base_url=url, timeout=60) as http:
        answer = http.post(
            f"/log/threads/{thread}/runs/wait", json={"assistant_id": "support", "input": text}
        )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_the_threads_page_lists_the_demo_thread_verified(
    page: Page, served: tuple[str, Path, str], axe: str
) -> None:
    _, _, thread = served
    show(page, "/ui")
    row = page.locator(f'tr[data-thread="{thread}"]')
    expect(row).to_contain_text("completed")
    expect(row).to_contain_text("support")
    expect(row.locator(".badge.ok")).to_have_text("verified")
    scan(page, axe, "threads")


def test_the_timeline_steps_through_the_demo_thread_by_keyboard(
    page: Page, served: tuple[str, Path, str], axe: str
) -> None:
    _, _, thread = served
    show(page, "/ui")
    page.get_by_role("link", name=thread).click()
    page.wait_for_url(f"**/ui/threads/{thread}")
    page.wait_for_selector("tr.step")
    steps = page.locator("tr.step")
    expect(steps).to_have_count(5)
    expect(steps.nth(1)).to_contain_text("lookup_order (completed)")
    expect(page.locator("tr.event")).to_contain_text(["paused before refund", "by supervisor"])
    steps.first.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    expect(page.locator("#say")).to_have_text("step 3 selected")
    expect(steps.nth(2)).to_have_class("step selected")
    scan(page, axe, "timeline")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Enter")  # the state after step 2
    page.wait_for_url(f"**/ui/threads/{thread}/state/2")


def test_the_state_at_step_2_is_a_transcript_and_a_tree(
    page: Page, served: tuple[str, Path, str], axe: str
) -> None:
    _, _, thread = served
    show(page, f"/ui/threads/{thread}/state/2")
    expect(page.locator("h1")).to_have_text("State at step 2")
    messages = page.locator("article.msg")
    expect(messages).to_have_count(2)  # the tool's result is shown with its call
    expect(messages.nth(0)).to_contain_text("My order A-1042 arrived damaged.")
    expect(messages.nth(1)).to_contain_text("calls lookup_order")
    expect(messages.nth(1)).to_contain_text("delivered damaged")
    expect(page.locator(".tree")).to_contain_text('current_node: "agent"')
    scan(page, axe, "state")


def test_a_diff_of_two_steps(page: Page, served: tuple[str, Path, str], axe: str) -> None:
    _, _, thread = served
    show(page, f"/ui/threads/{thread}")
    page.get_by_label("Diff step").fill("2")
    page.get_by_label("with").fill("4")
    page.get_by_role("button", name="Diff", exact=True).click()
    page.wait_for_url(f"**/ui/threads/{thread}/diff?a=2&b=4")
    page.wait_for_selector("body[data-ready]")
    expect(page.locator("h2").first).to_have_text("Messages added (2)")
    expect(page.locator(".changes")).to_contain_text("execution_meta.step")
    expect(page.locator(".changes")).to_contain_text("2 → 4")
    scan(page, axe, "diff")


def test_a_fork_at_a_step_opens_the_new_thread(
    page: Page, served: tuple[str, Path, str], axe: str
) -> None:
    url, _, thread = served
    show(page, f"/ui/threads/{thread}")
    page.locator('tr.step[data-step="2"]').get_by_role("button", name="Fork here").click()
    page.wait_for_url(lambda at: not at.endswith(f"/ui/threads/{thread}"))
    page.wait_for_selector("tr.event")
    expect(page.locator("tr.event").first).to_contain_text(f"forked from {thread}")
    forked = page.url.rsplit("/", 1)[1]
    with httpx.Client(base_url=url) as http:
        assert http.get(f"/log/threads/{forked}/state").json()["step"] == 2
    page.get_by_role("link", name="diff with it").click()  # the source now, and the fork
    page.wait_for_url(f"**/ui/threads/{thread}/diff?with={forked}")
    page.wait_for_selector("body[data-ready]")
    expect(page.locator("h1")).to_have_text("Diff of step 5 and step 2")
    expect(page.locator("h2").nth(1)).to_have_text("Messages removed (3)")
    scan(page, axe, "fork-diff")
    show(page, "/ui")
    expect(page.locator(f'tr[data-thread="{forked}"]')).to_be_visible()


def test_approving_a_pending_tool_call_finishes_the_run_live(
    page: Page, served: tuple[str, Path, str], axe: str
) -> None:
    url, _, _ = served
    paused = run(url, "refund-7", "My order A-1042 arrived damaged.")
    assert paused["run"]["status"] == "interrupted"
    show(page, "/ui/threads/refund-7")
    expect(page.locator("#status")).to_have_text("interrupted_before")
    expect(page.locator(".pending")).to_contain_text("refund")
    scan(page, axe, "pending")
    page.get_by_role("button", name="Approve and resume").click()
    expect(page.locator("#status")).to_have_text("completed")  # from the live stream
    expect(page.locator("tr.step").last).to_contain_text("agent")
    expect(page.locator("tr.event").last).to_contain_text("run completed")
    with httpx.Client(base_url=url) as http:
        records = http.get("/log/threads/refund-7/records").json()["records"]
    resumed = [r for r in records if r["kind"] == "resumed"]
    assert [r["actor"] for r in resumed] == ["local"]  # the page's principal


def test_rejecting_a_pending_tool_call_answers_it_as_an_edit_and_goes_on(
    page: Page, served: tuple[str, Path, str]
) -> None:
    url, _, _ = served
    run(url, "refund-8", "My order A-1042 arrived damaged.")
    show(page, "/ui/threads/refund-8")
    expect(page.locator(".pending")).to_contain_text("issue_refund")
    page.get_by_label("Why").fill("too much")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("tr.step", has_text="edit by local")).to_have_count(1)  # live
    expect(page.locator("tr.step").last).to_contain_text("agent")  # the run went on
    with httpx.Client(base_url=url) as http:
        state = http.get("/log/threads/refund-8").json()
    results = [
        block
        for message in state["values"]["context"]
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert results[-1]["output"] == "rejected: too much"
    assert results[-1]["is_error"] is True


def test_a_hostile_message_renders_as_text(
    page: Page, served: tuple[str, Path, str], axe: str
) -> None:
    url, _, _ = served
    run(url, "hostile", HOSTILE)
    show(page, "/ui/threads/hostile/state/0")
    first = page.locator("article.msg").first
    expect(first).to_contain_text("<img src=x onerror=window.__pwned=1>")
    expect(first).to_contain_text("\\x1b[31mred\\x1b[0m")  # the escape shown, not obeyed
    expect(first).to_contain_text("\\u202egnp.exe")  # the override shown, not applied
    assert page.locator("main img").count() == 0
    assert page.locator("main a[href^=javascript]").count() == 0
    assert page.evaluate("window.__pwned") is None
    scan(page, axe, "hostile")


def test_the_threads_page_follows_a_thread_it_lists(
    page: Page, served: tuple[str, Path, str]
) -> None:
    url, _, _ = served
    run(url, "live-9", "My order A-1042 arrived damaged.")
    show(page, "/ui")
    row = page.locator('tr[data-thread="live-9"]')
    expect(row).to_contain_text("interrupted_before")
    with httpx.Client(base_url=url, timeout=60) as http:
        done = http.post(
            "/log/threads/live-9/runs/wait",
            json={"assistant_id": "support", "command": {"resume": None}},
        )
    assert done.status_code == 200, done.text
    expect(row.locator("td").nth(1)).to_have_text("completed")  # no reload


def test_a_tampered_thread_shows_a_red_verify_badge(
    page: Page, served: tuple[str, Path, str]
) -> None:
    url, db, _ = served
    run(url, "tampered", "My order A-1042 arrived damaged.")
    run(url, "tampered-late", "My order A-1042 arrived damaged.")
    show(page, "/ui/threads/tampered-late")  # checked before the damage: kept for its head
    expect(page.locator("h1 + p .badge")).to_have_text("verified")
    edit_db(db, "UPDATE events SET actor = 'mallory' WHERE thread_id LIKE 'tampered%' AND seq = 2")
    show(page, "/ui")
    badge = page.locator('tr[data-thread="tampered"] .badge')
    expect(badge).to_have_class("badge bad")
    expect(badge).to_have_text("broken at seq 2")
    show(page, "/ui/threads/tampered")
    page.get_by_role("button", name="Verify").click()
    expect(page.locator("#say")).to_contain_text("broken at seq 2")
    show(page, "/ui/threads/tampered-late")  # the button checks afresh, and the badges follow
    page.get_by_role("button", name="Verify").click()
    expect(page.locator("#say")).to_contain_text("broken at seq 2")
    show(page, "/ui")
    expect(page.locator('tr[data-thread="tampered-late"] .badge')).to_have_text("broken at seq 2")


def test_the_api_reference_at_docs_works_offline(page: Page, served: tuple[str, Path, str]) -> None:
    url, _, _ = served
    elsewhere: list[str] = []
    refused: list[str] = []

    def only_the_server(route: Route) -> None:
        if route.request.url.startswith(url + "/"):
            route.continue_()
        else:  # as if offline: anything but the server fails
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    page.on("console", lambda m: refused.append(m.text) if "Security Policy" in m.text else None)
    answer = page.goto("/docs")
    assert answer is not None
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    expect(page.locator(".opblock").first).to_be_visible()  # the operations, listed
    expect(page.locator('.opblock-summary-path[data-path="/log/threads/search"]')).to_be_visible()
    assert page.locator(".opblock").count() > 20
    assert elsewhere == []
    assert refused == []


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def enter_token(page: Page, token: str) -> None:
    """Type a token in the page's header; the page reloads acting as it."""
    page.get_by_label("Token").fill(token)
    with page.expect_navigation():
        page.get_by_role("button", name="Use").click()
    page.wait_for_selector("body[data-ready]")


def test_a_token_entered_in_the_page_cancels_a_running_run_as_its_name(
    guarded_page: Page, guarded: tuple[str, str], axe: str
) -> None:
    url, _ = guarded
    page = guarded_page
    with httpx.Client(base_url=url, headers=bearer("ops"), timeout=60) as http:
        started = http.post(
            "/log/threads/held-1/runs", json={"assistant_id": "held", "input": "go"}
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]

        def status() -> str:
            return str(http.get(f"/log/threads/held-1/runs/{run_id}").json()["status"])

        until_blocking(lambda: status() == "running", what="the held run to start")
        show(page, "/ui/threads/held-1")
        expect(page.get_by_role("alert")).to_contain_text("token")  # none yet: refused, said
        enter_token(page, "ops")
        expect(page.locator("#status")).to_have_text("running")
        scan(page, axe, "running")
        page.get_by_role("button", name="Cancel run").click()
        expect(page.locator("#say")).to_have_text(f"cancelled {run_id}")
        expect(page.locator("tr.event", has_text="cancelled")).to_contain_text("by ops")  # live
        assert status() == "cancelled"
        records = http.get("/log/threads/held-1/records").json()["records"]
    cancelled = [r for r in records if r["kind"] == "run_cancelled"]
    assert [r["event"]["by"] for r in cancelled] == ["ops"]


def test_a_fork_from_the_page_is_recorded_with_the_tokens_name(
    guarded_page: Page, guarded: tuple[str, str]
) -> None:
    url, thread = guarded
    page = guarded_page
    show(page, f"/ui/threads/{thread}")
    enter_token(page, "ops")
    page.locator('tr.step[data-step="2"]').get_by_role("button", name="Fork here").click()
    page.wait_for_url(lambda at: not at.endswith(f"/ui/threads/{thread}"))
    expect(page.locator("tr.event").first).to_contain_text("by ops")
    forked = page.url.rsplit("/", 1)[1]
    with httpx.Client(base_url=url, headers=bearer("ops")) as http:
        records = http.get(f"/log/threads/{forked}/records").json()["records"]
    assert [r["actor"] for r in records if r["kind"] == "forked"] == ["ops"]


def test_a_token_without_the_right_sees_the_action_refused_in_words(
    guarded_page: Page, guarded: tuple[str, str]
) -> None:
    url, thread = guarded
    page = guarded_page
    show(page, f"/ui/threads/{thread}")
    enter_token(page, "reader")
    expect(page.locator("tr.step")).to_have_count(5)  # reading is allowed
    with httpx.Client(base_url=url, headers=bearer("ops")) as http:
        before = http.post("/log/threads/search", json={"limit": 100}).json()
    page.locator('tr.step[data-step="2"]').get_by_role("button", name="Fork here").click()
    expect(page.locator("#say")).to_have_text(
        "forbidden: token 'reader' lacks the 'edit' right on graph 'support'"
    )
    assert page.url.endswith(f"/ui/threads/{thread}")  # still here: nothing was made
    with httpx.Client(base_url=url, headers=bearer("ops")) as http:
        assert http.post("/log/threads/search", json={"limit": 100}).json() == before


def test_the_live_timeline_resumes_after_the_server_drops_its_stream(
    browser: Browser, tmp_path: Path
) -> None:
    db = tmp_path / "resume.db"
    demo(db)
    proc, url = start(db, app=APP)
    try:
        run(url, "resume-1", "My order A-1042 arrived damaged.")  # paused before the refund
        with opened(browser, url) as page:
            streams: list[str] = []
            page.on("request", lambda r: streams.append(r.url) if "/stream" in r.url else None)
            show(page, "/ui/threads/resume-1")
            expect(page.locator("#status")).to_have_text("interrupted_before")
            until_blocking(lambda: streams, what="the page to follow the thread")
            shown = page.locator("tr.step").count()
            proc.send_signal(signal.SIGTERM)  # a drain: the open stream ends at once
            proc.communicate(timeout=30)
            proc, again = start(db, "--port", url.rsplit(":", 1)[1], app=APP)
            assert again == url
            with httpx.Client(base_url=url, timeout=60) as http:
                done = http.post(
                    "/log/threads/resume-1/runs/wait",
                    json={"assistant_id": "support", "command": {"resume": None}},
                )
                assert done.status_code == 200, done.text
                step = http.get("/log/threads/resume-1?values=false").json()["step"]
            expect(page.locator("#status")).to_have_text("completed")  # live, after the drop
            expect(page.locator("tr.step")).to_have_count(step)
            steps = page.locator("tr.step").evaluate_all("rows => rows.map((r) => r.dataset.step)")
            assert steps == [str(n) for n in range(1, step + 1)]  # none lost, none twice
            assert step > shown
            expect(page.locator("tr.event", has_text="run completed")).to_have_count(1)
            assert len(streams) >= 2 and "after=0" not in streams[-1]  # went on from where it was
    finally:
        stop(proc)
