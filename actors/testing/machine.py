"""A hypothesis state machine for a user's own graph: the things that happen to a real thread,
in random order, with the log's guarantees checked after each.

    from agentlog.actors.testing import graph_machine

    SupportMachine = graph_machine(build_support_app, name="SupportMachine",
                                   invariants=[refund_within_total])
    TestSupport = SupportMachine.TestCase

`build_support_app(store)` compiles the graph on the store it is given; the machine calls it
for a first life and again after every crash. Rules: new input, resume, an answer to an
interrupt, a human edit (`as_node` too), a stop at a chosen commit, a second invocation while
a run is paused at a chosen commit, a crash at a chosen commit followed by a reopen and a
resume, a fork at a past step, and a look at a past step. After every rule the machine checks
its invariants (see `GraphMachine.check`) and the user's own, plain functions of the state
that return False or raise `AssertionError` when a rule of the domain is broken.

Alongside the thread under test runs a shadow: the same graph, the same inputs, never a crash.
The two must end in the same state (ids and times aside): that is what catches state kept
outside the log (a module global, a counter in a closure, the wall clock). A failure names
the broken invariant, shows the difference, and prints the shrunk steps, in agentlog's API and
as a pytest test that fails the same way when pasted into a test file (`MachineFailure.test`,
written by `agentlog.actors.testing.script`).

hypothesis is needed (`pip install 'agentlog[testing]'`).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentlog.actors.engine.command import Command
from agentlog.actors.engine.portal import Portal
from agentlog.actors.testing.checks import paused_at
from agentlog.actors.testing.doubles import FakeClock, _SeededIds
from agentlog.actors.testing.lanes import Factory, Lane, Outcome, StoreKind
from agentlog.actors.testing.report import MachineFailure, comparable, difference
from agentlog.actors.testing.script import Broken, Script, Step
from agentlog.events.errors import AgentlogError, ThreadBusyError
from agentlog.events.kinds import MessageAppended, ToolCallFinished, ToolCallStarted
from agentlog.projections import AgentState, Message, replay, step_seq, verify_snapshots
from agentlog.projections.forks import fork_state
from agentlog.projections.ids import message_defaults
from agentlog.projections.invariants import thread_findings

if TYPE_CHECKING:
    from agentlog.actors.engine.graph import StateGraph

T = TypeVar("T")

Invariant = Callable[[AgentState], object]
"""A user's rule of the domain: False or an `AssertionError` means it is broken."""
Code = Callable[[Lane, Outcome | None], tuple[str, ...]]
"""The code that does a step again on a lane, given what it came to there."""

DEFAULT_INPUTS: st.SearchStrategy[Any] = st.sampled_from(
    ["hello", "where is my order?", "I want a refund", ""]
)
DEFAULT_ANSWERS: st.SearchStrategy[Any] = st.none() | st.sampled_from(["yes", "no"])
DEFAULT_EDITS: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    ["please hurry", "actually, never mind"]
).map(lambda text: {"messages": [Message.text_message(text, role="user")]})
MAX_COMMIT = 12
"""The commits a crash, stop or pause is placed among (a later one may never come)."""
COMMITS: st.SearchStrategy[int] = st.one_of(st.integers(1, 3), st.integers(1, MAX_COMMIT))
"""Which commit of a call: the first few half the time, since a short call (one node, two or
three commits) would leave most of a uniform draw past its end, and the fault unplaced."""


class GraphMachine(RuleBasedStateMachine):
    """The machinery; `graph_machine` makes the class a test uses, with its rules."""

    factory: ClassVar[Factory]
    store_kind: ClassVar[StoreKind] = "memory"
    kill_spec: ClassVar[str | None] = None
    """With crashes="sigkill": the factory as "module:attribute" for the child process."""
    user_invariants: ClassVar[Sequence[Invariant]] = ()
    seed: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.portal = Portal()
        self.clock = FakeClock()
        self.ids = _SeededIds(self.seed)
        self.shadow_ids = _SeededIds(self.seed)
        self.script: list[str] = []
        self.steps: list[Step] = []
        self.pending: Step | None = None
        """The step under way, for a failure found in the middle of it."""
        self.code = Script(type(self))
        self.notes: list[str] = []
        self.forks = 0
        self.main = Lane(type(self).factory, self.store_kind, self.clock)
        self.shadow = Lane(type(self).factory, "memory", FakeClock(self.clock.now))
        self.live: AgentState | None = None
        self.shadow_live: AgentState | None = None
        self._run(self.main.begin(), self.ids)
        self._run(self.shadow.begin(), self.shadow_ids)

    # ---- plumbing -----------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], ids: _SeededIds) -> T:
        """Run `coro` on the machine's own loop (any test, async or not, may drive it), with
        seeded ids and the fake clock, so an example replays exactly."""

        async def seeded() -> T:
            with message_defaults(ids=ids, clock=self.clock):
                return await coro

        try:
            result: T = self.portal.call(seeded())
        finally:
            notes, self.notes = self.notes, []
            for note in notes:
                _event(note)  # hypothesis records events only from the test's own thread
        return result

    def both(
        self,
        step: str,
        act: Callable[[Lane], Coroutine[Any, Any, Outcome | None]],
        code: Code,
    ) -> tuple[Outcome | None, Outcome | None]:
        """Do the same thing to the thread and its shadow, and note it in the script."""
        self.script.append(step)
        main = self._run(act(self.main), self.ids)
        shadow = self._run(act(self.shadow), self.shadow_ids)
        self.clock.advance(1.0)
        self.shadow.clock.advance(1.0)
        self.record(step, code(self.main, main), code(self.shadow, shadow))
        if main is not None and shadow is not None and main.result != shadow.result:
            self.fail(
                "the same call ended differently with and without the history behind it",
                f"{step}: {main.result} here, {shadow.result} without crashes",
                "shadow",
            )
        self._settle(main, shadow)
        return main, shadow

    def record(self, said: str, main: tuple[str, ...], shadow: tuple[str, ...]) -> None:
        """Keep the code of a step done, for the test a failure prints."""
        self.pending = None
        self.steps.append(Step(said, main, None if shadow == main else shadow))

    def _settle(self, main: Outcome | None, shadow: Outcome | None) -> None:
        if main is not None:
            self.live = main.state
        if shadow is not None:
            self.shadow_live = shadow.state

    def fail(
        self,
        invariant: str,
        detail: str,
        broken: Broken = "log",
        check: Invariant | None = None,
    ) -> None:
        """Raise the failure: what broke, where the states differ, the steps as a test."""
        steps = [*self.steps, *([self.pending] if self.pending is not None else [])]
        try:
            test = self.code.render(steps, broken, check)
        except Exception as exc:  # a failure must be reported even if its script cannot be
            test = f"# the steps could not be written as a test: {type(exc).__name__}: {exc}"
        raise MachineFailure(invariant, detail, self.script, type(self), test=test)

    def _call(self, expr: str, outcome: Outcome | None) -> tuple[str, ...]:
        """`await expr` as the code of a step that came to `outcome`."""
        failed = outcome.result.removeprefix("error:") if outcome and outcome.failed else None
        return self.code.call(expr, failed)

    # ---- what a rule does ---------------------------------------------------------------

    def send(self, input: Any, shown: str) -> None:
        expr = f"app.ainvoke({self.code.value(input)}, config)"
        self.both(
            f"await app.ainvoke({shown}, config)",
            lambda lane: lane.call(input),
            lambda lane, outcome: self._call(expr, outcome),
        )

    def edit(self, values: dict[str, Any], as_node: str | None) -> None:
        expr = f"app.aupdate_state(config, {self.code.value(values)}, as_node={as_node!r})"
        self.both(
            f"await app.aupdate_state(config, {_shown(values)}, as_node={as_node!r})",
            lambda lane: lane.edit(values, as_node),
            lambda lane, outcome: self._call(expr, outcome),
        )

    def crash(self, input: Any, shown: str, commit: int, when: str) -> None:
        self.script.append(
            f"# crash {when} commit {commit} of:  await app.ainvoke({shown}, config)"
        )
        if self.kill_spec is not None:
            crashing = self.main.kill_during(self.kill_spec, input, commit, when)  # type: ignore[arg-type]
        else:
            crashing = self.main.crash_during(input, commit, when)  # type: ignore[arg-type]
        crashes = self.main.crashes
        main = self._run(crashing, self.ids)
        _event(f"crash {when} a commit: {'done' if self.main.crashes > crashes else 'too late'}")
        where = " in a child process" if self.kill_spec is not None else ""
        if main is None:
            self.script[-1] = (
                f"await app.ainvoke({shown}, config)  # ended{where} before commit {commit}"
            )
        else:
            after = {
                "resumed": "resumed the thread",
                "retried": "called again (nothing of the call was recorded)",
                "ended": "left it (the run's end was recorded)",
            }
            self.script.append(
                "# ... reopened the store, rebuilt the app, "
                + after.get(self.main.recovery or "", "resumed the thread")
            )
        shadow = self._run(self.shadow.call(input), self.shadow_ids)
        self.clock.advance(1.0)
        self.shadow.clock.advance(1.0)
        expr = f"app.ainvoke({self.code.value(input)}, config)"
        calm = self._call(expr, shadow)
        again = f"app, store = await restart(build, store{self.code.reopen()})"
        spawned: tuple[str, ...] = ()
        if self.kill_spec is not None:  # the call ran in a child process, with an app of its own
            spawned = (f"{again}  # the call runs in a new process",)
        if main is None:
            ended = self._call(expr, self.main.uncrashed)
            exited = (f"{again}  # ... which exits",) if spawned else ()
            self.record(self.script[-1], (*spawned, *ended, *exited), calm)
        else:
            recovered: tuple[str, ...] = ()
            if self.main.recovery == "resumed":
                recovered = self._call("app.ainvoke(None, config)", main)
            elif self.main.recovery == "retried":
                recovered = self._call(expr, main)
            self.record(
                self.script[-2],
                (
                    *spawned,
                    f"store.crash_at({commit}, {when!r})  # the process dies there",
                    *self.code.call(expr, "the crash"),
                    again,
                    *recovered,
                ),
                calm,
            )
        self._settle(main or Outcome("", self._run(self.main.state(), self.ids)), shadow)

    def stop(self, input: Any, shown: str, commit: int) -> None:
        held: dict[bool, bool] = {}

        async def act(lane: Lane) -> Outcome:
            faulty = lane.life.store
            run = await paused_at(faulty, lane.call(input), commit)
            held[lane is self.main] = faulty.paused.is_set()
            if faulty.paused.is_set():
                stopped = await lane.app.astop(lane.config)
                if lane is self.main:
                    self.notes.append(f"stop at a commit: {'asked' if stopped else 'no run'}")
            faulty.disarm()
            return await run

        expr = f"app.ainvoke({self.code.value(input)}, config)"

        def code(lane: Lane, outcome: Outcome | None) -> tuple[str, ...]:
            if not held.get(lane is self.main):
                return self._call(expr, outcome)
            return (
                f"run = await paused_at(store, {expr}, {commit})",
                "await app.astop(config)",
                "store.disarm()",
                *self._call("run", outcome),
            )

        said = f"# astop() after commit {commit} of:  await app.ainvoke({shown}, config)"
        self.both(said, act, code)

    def second_invocation(self, input: Any, shown: str, commit: int) -> None:
        expr = f"app.ainvoke({self.code.value(input)}, config)"
        second = (
            f"run = await paused_at(store, {expr}, {commit})",
            'seq = await store.last_seq(config["thread_id"])',
            "with pytest.raises(ThreadBusyError):  # a second invocation while the first is paused",
            f"    await {expr}",
            'assert await store.last_seq(config["thread_id"]) == seq  # it wrote nothing',
            "store.disarm()",
        )
        said = (
            f"# a second ainvoke while paused at commit {commit} of:  "
            f"await app.ainvoke({shown}, config)"
        )
        self.pending = Step(said, (*second, "await run"))
        held: dict[bool, bool] = {}

        async def act(lane: Lane) -> Outcome:
            faulty = lane.life.store
            run = await paused_at(faulty, lane.call(input), commit if lane is self.main else None)
            held[lane is self.main] = faulty.paused.is_set()
            if faulty.paused.is_set():
                seq = await lane.inner.last_seq(lane.thread_id)
                try:
                    await lane.app.ainvoke(input, lane.config)
                except ThreadBusyError:
                    self.notes.append("a second invocation was refused")
                else:
                    self.fail(
                        "two runs never share a thread",
                        f"a second ainvoke ran while the first was paused at commit {commit}",
                    )
                if await lane.inner.last_seq(lane.thread_id) != seq:
                    self.fail("a refused call writes nothing", "the second ainvoke wrote")
            faulty.disarm()
            return await run

        def code(lane: Lane, outcome: Outcome | None) -> tuple[str, ...]:
            if not held.get(lane is self.main):
                return self._call(expr, outcome)
            return (*second, *self._call("run", outcome))

        self.both(said, act, code)

    def fork(self, pick: int, switch: bool) -> None:
        steps = self._run(self._steps(), self.ids)
        if not steps:
            return
        step = steps[pick % len(steps)]
        self.forks += 1
        new_id = f"{self.main.thread_id}~fork{self.forks}"
        said = f"await app.afork(config, at_step={step}, new_thread_id={new_id!r})"
        lines: tuple[str, ...] = (f"await {said.removeprefix('await ')}",)
        if switch:
            lines += (f"config = {{'thread_id': {new_id!r}}}", f"store.thread_id = {new_id!r}")
        self.pending = Step(said, lines)

        async def act(lane: Lane) -> Outcome:
            await lane.app.afork(lane.config, at_step=step, new_thread_id=new_id)
            source = await lane.app.aget_state(lane.config, at_step=step)
            at = await step_seq(lane.app.store, lane.thread_id, step)
            expected = fork_state(source, lane.thread_id, at)  # a run going there: paused
            forked = await lane.app.aget_state({"thread_id": new_id})
            mine, theirs = (comparable(s, exact=True, internal=False) for s in (forked, expected))
            if mine != theirs:
                self.fail("a fork's prefix equals its source", difference(theirs, mine))
            if switch:
                lane.thread_id = new_id
                lane.life.store.thread_id = new_id
            return Outcome(forked.execution_meta.status.value, await lane.state())

        self.both(said, act, lambda lane, outcome: lines)
        if switch:
            self.script.append(f"config = {{'thread_id': {new_id!r}}}")

    def look_back(self, pick: int) -> None:
        async def act() -> None:
            steps = await self._steps()
            if not steps:
                return
            step = steps[pick % len(steps)]
            lane = self.main
            seen = await lane.app.aget_state(lane.config, at_step=step)
            seq = await step_seq(lane.inner, lane.thread_id, step)
            prefix = [r async for r in lane.inner.read(lane.thread_id, 1, seq)]
            folded = replay(prefix, lane.app.graph.state_cls)
            if comparable(seen, exact=True) != comparable(folded, exact=True):
                self.fail(
                    "the state at a past step is the log's prefix folded",
                    difference(comparable(folded, exact=True), comparable(seen, exact=True)),
                )

        self._run(act(), self.ids)

    async def _steps(self) -> list[int]:
        if await self.main.inner.last_seq(self.main.thread_id) == 0:
            return []
        return [entry.step for entry in await self.main.app.aget_state_history(self.main.config)]

    def interrupted(self) -> bool:
        return self.live is not None and self.live.execution_meta.is_interrupted()

    # ---- invariants -----------------------------------------------------------------------

    @invariant()
    def check(self) -> None:
        """After every rule: the log replays (from a reopened store) to the live state, a
        snapshot of it plus the tail replays to the same, the chain verifies, every tool call
        has one result, no committed tool result ran again, the shadow agrees, and the user's
        invariants hold."""
        self._run(self._check_log(), self.ids)
        self._check_shadow()
        self._check_user()

    async def _check_log(self) -> None:
        lane = self.main
        if await lane.inner.last_seq(lane.thread_id) == 0:
            return
        state_cls = lane.app.graph.state_cls
        reopened = lane._open() if lane.kind == "sqlite" else lane.inner
        records: list[Any] = []
        unread: AgentlogError | None = None
        try:
            report = await reopened.verify(lane.thread_id)
            if report.ok:
                try:
                    records = [r async for r in reopened.read(lane.thread_id)]
                except AgentlogError as exc:  # a typed refusal to read is a finding too
                    unread = exc
        finally:
            if reopened is not lane.inner:
                await reopened.close()
        if not report.ok:
            self.fail("the hash chain verifies", str(report))
        if unread is not None:
            said = f"{type(unread).__name__}: {unread}"
            self.fail("the log reads back from a reopened store", said)
        folded = replay(records, state_cls)
        if self.live is not None and comparable(self.live, exact=True) != comparable(
            folded, exact=True
        ):
            self.fail(
                "replay of the log equals the live state",
                difference(comparable(self.live, exact=True), comparable(folded, exact=True)),
            )
        await self._check_snapshot(folded, records)
        findings = await thread_findings(lane.inner, lane.thread_id, state_cls)
        if not findings.ok:
            self.fail("every tool call has exactly one result", str(findings.findings[0]))
        self._check_reruns(records)

    async def _check_snapshot(self, folded: AgentState, records: list[Any]) -> None:
        """Snapshot the head and fold it back: snapshot + tail must equal the replay."""
        from agentlog.projections import state_at, write_snapshot

        lane = self.main
        head = records[-1]
        await write_snapshot(lane.inner, lane.thread_id, head.seq, folded, hash=head.hash)
        again = await state_at(lane.inner, lane.thread_id, state_cls=lane.app.graph.state_cls)
        if comparable(again, exact=True) != comparable(folded, exact=True):
            self.fail(
                "snapshot + tail equals replay",
                difference(comparable(folded, exact=True), comparable(again, exact=True)),
            )
        findings = [f for f in await verify_snapshots(lane.inner, lane.thread_id) if f.problem]
        if findings:
            self.fail("every snapshot agrees with the log", str(findings[0]))

    def _check_reruns(self, records: list[Any]) -> None:
        started: dict[str, int] = {}
        finished: set[str] = set()
        asked_again: dict[str, int] = {}
        for record in records:
            if isinstance(record.event, ToolCallFinished):
                finished.add(record.event.call_id)
            elif isinstance(record.event, ToolCallStarted) and record.event.call_id in finished:
                started[record.event.call_id] = record.seq
            elif isinstance(record.event, MessageAppended):
                for block in record.event.message.get("content") or []:
                    called = isinstance(block, dict) and block.get("type") == "tool_call"
                    if called and str(block.get("id")) in finished:
                        asked_again.setdefault(str(block.get("id")), record.seq)
        if started:
            call, seq = next(iter(started.items()))
            why = f"call {call!r} started again at seq {seq} after its result was committed"
            if call in asked_again:
                why += (
                    f": the assistant message at seq {asked_again[call]} asked for a call "
                    f"with the id {call!r} again, and each tool call needs an id of its own "
                    "(a model gives fresh ones; a scripted or hand-written node must too)"
                )
            self.fail("no committed tool result runs again", why)
        for life in self.main.lives:
            for tool in life.tools:
                again = [c for c in tool.calls if c.call_id in life.finished_before]
                if again:
                    self.fail(
                        "no committed tool result runs again",
                        f"{tool.fn.__name__} ran call {again[0].call_id!r} again after a crash "
                        "although its result was already committed",
                    )

    def _check_shadow(self) -> None:
        if self.live is None or self.shadow_live is None:
            return
        mine, theirs = comparable(self.live), comparable(self.shadow_live)
        if mine != theirs:
            self.fail(
                "the same inputs without a crash end in the same state (state kept outside "
                "the log: a module global, a counter in a closure, the wall clock?)",
                difference(theirs, mine),
                "shadow",
            )

    def _check_user(self) -> None:
        if self.live is None:
            return
        for check in self.user_invariants:
            name = getattr(check, "__name__", repr(check))
            try:
                held = check(self.live)
            except AssertionError as exc:
                said = str(exc) or "assertion failed"
                self.fail(f"the user's invariant {name}", said, "user", check)
            except Exception as exc:
                try:
                    self.fail(
                        f"the user's invariant {name}",
                        f"it raised {type(exc).__name__}: {exc} (an invariant returns False or "
                        "raises AssertionError when the rule is broken; anything else is a bug "
                        "in the invariant, or a state it did not expect)",
                        "user",
                        check,
                    )
                except MachineFailure as failure:
                    raise failure from exc
            else:
                if held is False:
                    self.fail(f"the user's invariant {name}", "it returned False", "user", check)

    def teardown(self) -> None:
        try:
            self._run(self.main.close(), self.ids)
            self._run(self.shadow.close(), self.shadow_ids)
        finally:
            self.portal.close()


def _event(note: str) -> None:
    """Count `note` in hypothesis's statistics (nothing when run outside a test)."""
    with contextlib.suppress(InvalidArgument):
        event(note)


def _shown(value: Any) -> str:
    """`value` as the steps show it: short, a message by its role and text."""
    if isinstance(value, Command):
        return f"Command(resume={_shown(value.resume)})"
    if isinstance(value, Message):
        return f"Message.text_message({value.text()[:60]!r}, role={value.role!r})"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_shown(v)}" for k, v in value.items()) + "}"
    return repr(value)


def graph_machine(
    factory: Factory | StateGraph[Any],
    *,
    inputs: st.SearchStrategy[Any] = DEFAULT_INPUTS,
    answers: st.SearchStrategy[Any] = DEFAULT_ANSWERS,
    edits: st.SearchStrategy[dict[str, Any]] | None = DEFAULT_EDITS,
    invariants: Sequence[Invariant] = (),
    store: StoreKind = "memory",
    crashes: Literal["in-process", "sigkill"] = "in-process",
    seed: int = 0,
    name: str = "GraphMachine",
) -> type[GraphMachine]:
    """A `RuleBasedStateMachine` class for the graph `factory(store)` builds (or for a
    `StateGraph`, compiled with the default options on each store).

    `inputs`, `answers` and `edits` draw what a user sends, answers to interrupts and human
    edits (`aupdate_state` values; None leaves edits out); `invariants` are the domain's
    rules; `store` is "memory" (fast) or "sqlite" (a real file, reopened after each crash).
    `crashes="in-process"` (the default) kills the app at a commit by refusing every write
    after it and dropping its claims, which is weaker than a real death (see
    `agentlog.actors.testing.faults`); "sigkill" runs each crashing call in a child process that
    SIGKILLs itself there (a SQLite store, a factory importable by name, JSON inputs; slow).
    Give `name` the variable you assign it to, so the steps hypothesis prints can be run.
    """
    from agentlog.actors.engine.graph import StateGraph

    if isinstance(factory, StateGraph):
        if crashes == "sigkill":
            raise TypeError(
                'crashes="sigkill" imports the factory in a child process: pass a top-level '
                "function build(store) returning graph.compile(store), not the graph itself"
            )
        factory = _compiler(factory)
    if not callable(factory):
        raise TypeError(
            f"graph_machine takes your StateGraph or a function build(store) returning "
            f"graph.compile(store), got {type(factory).__name__}"
        )
    if store not in ("memory", "sqlite"):
        raise ValueError(f"store must be 'memory' or 'sqlite', got {store!r}")
    if callable(invariants) or not isinstance(invariants, Sequence | set | frozenset):
        raise TypeError(
            f"invariants is a list of functions of the state, got {invariants!r:.80}: write "
            "invariants=[your_rule]"
        )
    for check in invariants:
        if not callable(check):
            raise TypeError(f"an invariant is a function of the state, got {check!r}")
    if len(inspect.signature(factory).parameters) < 1:
        raise TypeError(
            f"the factory {getattr(factory, '__qualname__', factory)!r} takes the store to "
            "compile on: def build(store): return graph.compile(store)"
        )
    kill_spec = None
    if crashes == "sigkill":
        if store != "sqlite":
            raise ValueError('crashes="sigkill" needs store="sqlite": a child process shares it')
        kill_spec = _importable(factory)
    elif crashes != "in-process":
        raise ValueError(f"crashes must be 'in-process' or 'sigkill', got {crashes!r}")
    commits = COMMITS
    whens = st.sampled_from(["before", "after"])
    node_names = _node_names(factory)

    class Machine(GraphMachine):
        @rule(input=inputs)
        def send_input(self, input: Any) -> None:
            self.send(input, _shown(input))

        @rule()
        def resume(self) -> None:
            self.send(None, "None")

        @precondition(lambda self: self.interrupted())
        @rule(answer=answers)
        def answer_interrupt(self, answer: Any) -> None:
            self.send(Command(resume=answer), _shown(Command(resume=answer)))

        @rule(input=inputs, commit=commits)
        def stop_at(self, input: Any, commit: int) -> None:
            self.stop(input, _shown(input), commit)

        @rule(input=inputs, commit=commits)
        def invoke_twice(self, input: Any, commit: int) -> None:
            self.second_invocation(input, _shown(input), commit)

        @rule(input=st.none() | inputs, commit=commits, when=whens)
        def crash_at(self, input: Any, commit: int, when: str) -> None:
            self.crash(input, _shown(input), commit, when)

        @rule(pick=st.integers(0, 50), switch=st.booleans())
        def fork_at(self, pick: int, switch: bool) -> None:
            self.fork(pick, switch)

        @rule(pick=st.integers(0, 50))
        def time_travel(self, pick: int) -> None:
            self.look_back(pick)

        if edits is not None:

            @rule(values=edits, as_node=st.none() | st.sampled_from(node_names))
            def human_edit(self, values: dict[str, Any], as_node: str | None) -> None:
                self.edit(values, as_node)

    Machine.factory = staticmethod(factory)
    Machine.store_kind = store
    Machine.kill_spec = kill_spec
    Machine.user_invariants = tuple(invariants)
    Machine.seed = seed
    Machine.__name__ = Machine.__qualname__ = name
    return Machine


def _importable(factory: Factory) -> str:
    """The factory as "module:attribute", which a child process can import."""
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    if not module or not name or module == "__main__" or "<locals>" in name:
        raise TypeError(
            f'crashes="sigkill" imports the factory in a child process: {factory!r} must be '
            "a function defined at the top level of an importable module"
        )
    return f"{module}:{name}"


def _compiler(graph: Any) -> Factory:
    """A factory compiling `graph` (with the default options) on the store it is given."""

    def build(store: Any) -> Any:
        return graph.compile(store)

    build.__qualname__ = build.__name__ = f"{graph.name or 'graph'}.compile"
    build.graph = graph  # type: ignore[attr-defined]  # what a printed test compiles
    return build


def _node_names(factory: Factory) -> list[str]:
    """The graph's nodes, from an app built on a throwaway store."""
    from agentlog.actors.engine.compiled import CompiledGraph
    from agentlog.events import MemoryEventStore

    store = MemoryEventStore()
    app = factory(store)
    if not isinstance(app, CompiledGraph):
        raise TypeError(
            f"the factory {getattr(factory, '__qualname__', factory)!r} must return the "
            f"compiled graph (graph.compile(store)), got {type(app).__name__}"
        )
    if app.store is not store:
        app.close()
        raise TypeError(
            f"the factory {getattr(factory, '__qualname__', factory)!r} must compile the "
            "graph on the store it is given (graph.compile(store)), so the machine can crash "
            "and reopen it"
        )
    try:
        return sorted(app.graph.nodes)
    finally:
        app.close()


__all__ = ["DEFAULT_EDITS", "DEFAULT_INPUTS", "GraphMachine", "Invariant", "graph_machine"]
