"""When a timer entry point fires: its slots, from an interval or a cron expression.

A slot is the time a firing was due, in seconds since the epoch. Interval slots lie on a grid
anchored at the epoch (slot k is k * interval_s), so they are the same across restarts; cron
slots are the expression's times in the runtime's time zone (`RuntimeConfig.timezone`, local
by default). A slot fires once: the runtime records each firing
with its slot, and after a restart fires only slots after the last recorded one. Slots missed
while no runtime ran are coalesced: the latest one fires, once (the others are recorded as
skipped in that firing's record).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo

from croniter import CroniterError, croniter

from agentlog.actors.runtime.spec import EntryPoint, RegistrationError

MAX_MISSED = 1_000
"""Missed cron slots counted at most (a record says "1000" for "1000 or more")."""


@dataclass(frozen=True)
class Schedule:
    """The slots of one timer entry point."""

    interval_s: float | None = None
    cron: str | None = None
    zone: tzinfo = UTC
    """The zone the cron expression is read in (`RuntimeConfig.timezone`)."""

    @classmethod
    def of(cls, entry: EntryPoint, now: float | None = None, zone: tzinfo = UTC) -> Schedule:
        """The entry point's schedule (its cron read in its own `timezone`, else in `zone`);
        a bad cron expression is refused, naming it."""
        if entry.cron is not None:
            zone = ZoneInfo(entry.timezone) if entry.timezone else zone
            why = _cron_problem(entry.cron, time.time() if now is None else now)
            if why is not None:
                raise RegistrationError(
                    f"entry point {entry.id!r}: {entry.cron!r} is not a cron expression a "
                    f"timer can keep ({why}): five fields, minute hour day-of-month month "
                    "day-of-week in the runtime's time zone, e.g. '0 2 * * *' (or @hourly, "
                    "@daily, @weekly, @monthly, @yearly)"
                )
            return cls(cron=entry.cron, zone=zone)
        return cls(interval_s=float(entry.interval_s or 0))

    def slot_at_or_before(self, now: float) -> float:
        """The latest slot due at or before `now`."""
        if self.interval_s is not None:
            return self._index(now) * self.interval_s
        assert self.cron is not None
        start = datetime.fromtimestamp(now, self.zone)
        it = croniter(self.cron, start)
        nxt: float = it.get_next(float)
        if nxt <= now:  # croniter's next from an exact slot is the following one
            return nxt
        it = croniter(self.cron, start)
        prev: float = it.get_prev(float)
        return prev if prev <= now else now

    def next_after(self, slot: float) -> float:
        """The first slot strictly after `slot`."""
        if self.interval_s is not None:
            return (self._index(slot) + 1) * self.interval_s
        assert self.cron is not None
        nxt: float = croniter(self.cron, datetime.fromtimestamp(slot, self.zone)).get_next(float)
        return nxt

    def due(self, last_fired: float | None, now: float) -> tuple[float | None, int]:
        """The slot to fire now, if any, and how many earlier due slots it stands for.

        With nothing fired yet, only a slot due exactly now counts (a timer starts from the
        next slot unless `run_immediately`); otherwise every slot after `last_fired` up to
        `now` is due, and they coalesce into the latest.
        """
        latest = self.slot_at_or_before(now)
        if last_fired is None or latest <= last_fired:
            return None, 0
        if self.interval_s is not None:
            return latest, max(self._index(latest) - self._index(last_fired) - 1, 0)
        missed = 0
        slot = self.next_after(last_fired)
        while slot < latest and missed < MAX_MISSED:
            missed += 1
            slot = self.next_after(slot)
        return latest, missed

    def _index(self, when: float) -> int:
        """The interval slot at or before `when`, by number (robust to float rounding)."""
        assert self.interval_s is not None
        ratio = when / self.interval_s
        nearest = round(ratio)
        return nearest if abs(ratio - nearest) < 1e-6 else math.floor(ratio)


_RANDOM = re.compile(r"[HR](\(|/|$)", re.IGNORECASE)
"""A croniter random (R) or hashed (H) field: H, H/5, H(0-29), R."""
ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
"""The named schedules a cron entry point may use instead of five fields."""


def _cron_problem(cron: object, now: float) -> str | None:
    """What keeps `cron` from being a timer's schedule (None: nothing).

    Five fields only: croniter reads a sixth as seconds (so '0 0 2 * * *', seconds first as
    in Quartz, would fire every second of a minute on the 2nd), and its random (R) and
    hashed (H) fields are not the same slots across restarts, so a slot could fire twice.
    """
    if not isinstance(cron, str):
        return f"it is not text but {type(cron).__name__}"
    fields = cron.split()
    if len(fields) == 1 and fields[0].lower() in ALIASES:
        pass
    elif len(fields) != 5:
        return f"{len(fields)} fields"
    elif any(_RANDOM.match(token) for field in fields for token in field.split(",")):
        return "random (R) and hashed (H) fields give other slots after a restart"
    if not croniter.is_valid(cron):
        return "croniter cannot read it"
    try:
        croniter(cron, datetime.fromtimestamp(now, UTC)).get_next(float)
    except (CroniterError, ValueError, KeyError) as exc:
        return f"it has no next time: {exc}"
    return None
