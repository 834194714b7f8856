"""Goals (the seed's `Goal`): success criteria and constraints, measured from outcomes that
nodes record in the log, so progress survives a restart and can be recomputed as of any
past position."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentlog.actors.engine.context import current_context
from agentlog.actors.runtime.facts import Facts, Metric
from agentlog.actors.runtime.spec import RegistrationError
from agentlog.events.kinds import OutcomeRecorded

Aggregate = Literal["last", "sum", "count", "min", "max", "mean"]
AGGREGATES: tuple[str, ...] = ("last", "sum", "count", "min", "max", "mean")


@dataclass(frozen=True)
class SuccessCriterion:
    """A metric to bring to `target` (a number, or True for a pass/fail criterion), counted
    with `weight` in the goal's progress. `aggregate` says how the metric's recorded values
    combine (the last one by default; "sum" for a running total)."""

    id: str
    metric: str
    target: float | bool = 1.0
    weight: float = 1.0
    aggregate: Aggregate = "last"
    description: str = ""


@dataclass(frozen=True)
class Constraint:
    """A limit a metric must stay within (`max` and/or `min`, on its `aggregate`)."""

    id: str
    metric: str
    max: float | None = None
    min: float | None = None
    aggregate: Aggregate = "last"
    description: str = ""


@dataclass(frozen=True)
class Goal:
    """What the runtime's runs work towards: `success_criteria` and `constraints`."""

    id: str
    description: str = ""
    success_criteria: Sequence[SuccessCriterion] = ()
    constraints: Sequence[Constraint] = ()

    def check(self) -> None:
        """Refuse a goal that cannot be measured."""
        if not isinstance(self.id, str) or not self.id:
            raise RegistrationError(f"a goal needs a non-empty id, got {self.id!r}")
        if isinstance(self.success_criteria, str | SuccessCriterion) or isinstance(
            self.constraints, str | Constraint
        ):
            raise RegistrationError(
                f"goal {self.id!r}: success_criteria and constraints are lists "
                "(success_criteria=[SuccessCriterion(...)])"
            )
        if not self.success_criteria:
            raise RegistrationError(
                f"goal {self.id!r} has no success_criteria, so its progress would stay 0: give "
                "at least one SuccessCriterion(id, metric, target)"
            )
        seen: set[str] = set()
        for item in [*self.success_criteria, *self.constraints]:
            if not isinstance(item, SuccessCriterion | Constraint):
                raise RegistrationError(
                    f"goal {self.id!r}: criteria are SuccessCriterion and constraints are "
                    f"Constraint, got {item!r}"
                )
            if item.id in seen:
                raise RegistrationError(f"goal {self.id!r}: {item.id!r} is named twice")
            seen.add(item.id)
            if item.aggregate not in AGGREGATES:
                raise RegistrationError(
                    f"goal {self.id!r}, {item.id!r}: aggregate is one of "
                    f"{', '.join(AGGREGATES)}, got {item.aggregate!r}"
                )
        for criterion in self.success_criteria:
            if not _number(criterion.weight) or criterion.weight < 0:
                raise RegistrationError(
                    f"goal {self.id!r}, criterion {criterion.id!r}: weight is a number >= 0"
                )
            if not isinstance(criterion.target, bool) and (
                not _number(criterion.target) or criterion.target == 0
            ):
                raise RegistrationError(
                    f"goal {self.id!r}, criterion {criterion.id!r}: target is a non-zero "
                    "number or True"
                )
        for constraint in self.constraints:
            if constraint.max is None and constraint.min is None:
                raise RegistrationError(
                    f"goal {self.id!r}, constraint {constraint.id!r}: give max, min or both"
                )

    def names(self) -> set[str]:
        """Every criterion's and constraint's id and metric: what an outcome may name."""
        items: list[SuccessCriterion | Constraint] = [*self.success_criteria, *self.constraints]
        return {name for item in items for name in (item.id, item.metric)}

    def metric_of(self, name: str) -> str | None:
        """The metric a criterion or constraint id names, or `name` if it is a metric."""
        items: list[SuccessCriterion | Constraint] = [*self.success_criteria, *self.constraints]
        for item in items:
            if name in (item.id, item.metric):
                return item.metric
        return None


def record_outcome(
    criterion_or_metric: str, value: float | bool, *, goal_id: str | None = None
) -> None:
    """Record, in the running node's step, that a metric reached `value`.

    A criterion's id is turned into its metric when the run's runtime has a goal naming it;
    under a runtime with goals, a name none of them measures is refused (a typo would be
    recorded and never counted). Outside a runtime any metric name is recorded.
    """
    if not isinstance(criterion_or_metric, str) or not criterion_or_metric:
        raise RegistrationError(
            f"an outcome names a criterion or metric, got {criterion_or_metric!r}"
        )
    if not _number(value) and not isinstance(value, bool):
        raise RegistrationError(f"an outcome's value is a number or a bool, got {value!r}")
    from agentlog.actors.runtime.shared import _scope

    context = current_context()
    metric, goal = criterion_or_metric, goal_id
    scope = _scope.get()
    goals = scope.runtime.goals if scope is not None else {}
    if goal_id is None and scope is not None:  # a graph added with a goal counts towards it
        goal = goal_id = scope.runtime.graph_goal(scope.entry.graph_id)
    if goal_id is not None and goals and goal_id not in goals:
        raise RegistrationError(f"record_outcome: no goal {goal_id!r} (goals: {', '.join(goals)})")
    for known in goals.values():
        if goal_id not in (None, known.id):
            continue
        found = known.metric_of(criterion_or_metric)
        if found is not None:
            metric, goal = found, known.id
            break
    else:
        if goals:  # a typo would be recorded and never counted: say so now
            names = sorted({n for g in goals.values() for n in g.names()})
            raise RegistrationError(
                f"record_outcome: {criterion_or_metric!r} names no criterion, constraint or "
                f"metric of the runtime's goals ({', '.join(names)}): check the name, or add "
                "a SuccessCriterion or Constraint that measures it"
            )
    context.record(OutcomeRecorded(metric=metric, value=value, node=context.node, goal_id=goal))


def progress(goal: Goal, facts: Facts) -> dict[str, Any]:
    """The goal's progress as `facts` (folded up to some position) have it."""

    def metric(name: str) -> Metric | None:
        own, anyone = facts.metrics.get((goal.id, name)), facts.metrics.get((None, name))
        if own is None or anyone is None:
            return own or anyone
        merged = Metric()  # outcomes named for this goal, and those naming no goal
        for part in (anyone, own):
            merged.count += part.count
            merged.total += part.total
            merged.last = part.last
            for bound in (part.least, part.most):
                if bound is not None:
                    merged.least = bound if merged.least is None else min(merged.least, bound)
                    merged.most = bound if merged.most is None else max(merged.most, bound)
        return merged

    criteria: dict[str, dict[str, Any]] = {}
    weighted = total_weight = 0.0
    for criterion in goal.success_criteria:
        found = metric(criterion.metric)
        value = None if found is None else _aggregate(found, criterion.aggregate)
        share = _share(value, criterion.target)
        status = "not_started" if value is None else "met" if share >= 1.0 else "in_progress"
        criteria[criterion.id] = {
            "metric": criterion.metric,
            "target": criterion.target,
            "weight": criterion.weight,
            "value": value,
            "progress": share,
            "status": status,
            "description": criterion.description,
        }
        weighted += criterion.weight * share
        total_weight += criterion.weight
    violations = []
    for constraint in goal.constraints:
        found = metric(constraint.metric)
        value = None if found is None else _aggregate(found, constraint.aggregate)
        if value is None or not _number(value):
            continue
        broken = [
            (bound, limit)
            for bound, limit in (("max", constraint.max), ("min", constraint.min))
            if limit is not None and (value > limit if bound == "max" else value < limit)
        ]
        for bound, limit in broken:
            violations.append(
                {
                    "constraint": constraint.id,
                    "metric": constraint.metric,
                    "value": value,
                    bound: limit,
                    "description": constraint.description,
                }
            )
    names = {c.metric for c in goal.success_criteria} | {c.metric for c in goal.constraints}
    return {
        "goal_id": goal.id,
        "description": goal.description,
        "overall_progress": weighted / total_weight if total_weight else 0.0,
        "criteria": criteria,
        "constraint_violations": violations,
        "metrics": {
            name: found.summary() for name in sorted(names) if (found := metric(name)) is not None
        },
        "position": facts.position,
    }


def _aggregate(metric: Metric, how: str) -> Any:
    summary = metric.summary()
    return summary[how]


def _share(value: Any, target: float | bool) -> float:
    if value is None:
        return 0.0
    if isinstance(target, bool):
        return 1.0 if bool(value) is target else 0.0
    if not _number(value):
        return 0.0
    return max(0.0, min(float(value) / float(target), 1.0))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
