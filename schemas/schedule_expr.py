"""EventBridge schedule expressions, parsed so that a bad one is refused when a policy is created.

cron(minutes hours day-of-month month day-of-week year): six fields; exactly one of day-of-month and
day-of-week is '?'. rate(value unit): unit minute(s)/hour(s)/day(s), singular only for 1.
This covers the syntax EventBridge documents except the 'L', 'W' and '#' modifiers, which are refused
with a clear message rather than misread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

_MONTHS = {m: i for i, m in enumerate(["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], start=1)}
# EventBridge numbers days of week 1-7 from Sunday.
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"], start=1)}

_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minutes", 0, 59, {}),
    ("hours", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 1, 7, _DAYS),
    ("year", 1970, 2199, {}),
)


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int] | None  # None: '?'
    months: frozenset[int]
    days_of_week: frozenset[int] | None  # None: '?'
    years: frozenset[int]


@dataclass(frozen=True)
class Rate:
    seconds: int


def _value(token: str, lo: int, hi: int, names: dict[str, int], field: str) -> int:
    upper = token.upper()
    if upper in names:
        return names[upper]
    if not token.isdigit():
        raise ValueError(f"cron {field}: {token!r} is not a number{' or a name' if names else ''}")
    value = int(token)
    if not lo <= value <= hi:
        raise ValueError(f"cron {field}: {value} is outside {lo}-{hi}")
    return value


def _field(spec: str, field: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int] | None:
    if spec == "?":
        if field not in ("day-of-month", "day-of-week"):
            raise ValueError(f"cron {field}: '?' is only allowed in day-of-month or day-of-week")
        return None
    if any(ch in spec.upper() for ch in "LW#") and not any(n in spec.upper() for n in names):
        raise ValueError(f"cron {field}: the L, W and # modifiers are not supported")
    values: set[int] = set()
    for part in spec.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"cron {field}: bad step {step_text!r}")
            step = int(step_text)
        if part in ("*", ""):
            start, end = lo, hi
        elif "-" in part:
            a, b = part.split("-", 1)
            start, end = _value(a, lo, hi, names, field), _value(b, lo, hi, names, field)
            if start > end:
                raise ValueError(f"cron {field}: range {part!r} runs backwards")
        else:
            start = _value(part, lo, hi, names, field)
            end = hi if step > 1 else start
        values.update(range(start, end + 1, step))
    return frozenset(values)


def parse_cron(body: str) -> Cron:
    parts = body.split()
    if len(parts) != 6:
        raise ValueError(f"cron needs 6 fields (minutes hours day-of-month month day-of-week year), got {len(parts)}")
    parsed = [_field(spec, name, lo, hi, names) for spec, (name, lo, hi, names) in zip(parts, _FIELDS, strict=True)]
    dom, dow = parsed[2], parsed[4]
    if (dom is None) == (dow is None):
        raise ValueError("cron: exactly one of day-of-month and day-of-week must be '?'")
    minutes, hours, _, months, _, years = parsed
    assert minutes is not None and hours is not None and months is not None and years is not None
    return Cron(minutes, hours, dom, months, dow, years)


_RATE = re.compile(r"^(\d+)\s+(minute|minutes|hour|hours|day|days)$")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def parse_rate(body: str) -> Rate:
    match = _RATE.match(body.strip())
    if not match:
        raise ValueError("rate must look like rate(5 minutes), rate(1 hour) or rate(2 days)")
    value, unit = int(match.group(1)), match.group(2)
    if value < 1:
        raise ValueError("rate value must be at least 1")
    if (value == 1) == unit.endswith("s"):
        raise ValueError(f"rate({value} {unit}): use the singular unit for 1 and the plural otherwise")
    return Rate(value * _UNIT_SECONDS[unit.rstrip("s")])


def parse_schedule_expression(expression: str) -> Cron | Rate:
    text = expression.strip()
    if text.startswith("cron(") and text.endswith(")"):
        return parse_cron(text[5:-1])
    if text.startswith("rate(") and text.endswith(")"):
        return parse_rate(text[5:-1])
    raise ValueError("a schedule is cron(...) or rate(...)")


def next_fire(schedule: Cron | Rate, after: datetime, anchor: datetime | None = None) -> datetime | None:
    """The first time strictly after `after` when the schedule fires (UTC, minute resolution for cron).

    A rate fires every N seconds counted from `anchor` (when the policy was created or last changed).
    Returns None when a cron can never fire again (e.g. its years are all past).
    """
    if isinstance(schedule, Rate):
        start = anchor or after
        elapsed = max(0.0, (after - start).total_seconds())
        periods = int(elapsed // schedule.seconds) + 1
        return start + timedelta(seconds=periods * schedule.seconds)
    t = (after + timedelta(minutes=1)).replace(second=0, microsecond=0)
    limit = t.year + 8
    while t.year <= limit:
        if t.year not in schedule.years:
            t = datetime(t.year + 1, 1, 1, tzinfo=t.tzinfo)
            continue
        if t.month not in schedule.months:
            t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
            continue
        dow = (t.isoweekday() % 7) + 1  # Sunday = 1
        day_ok = schedule.days_of_month is None or t.day in schedule.days_of_month
        dow_ok = schedule.days_of_week is None or dow in schedule.days_of_week
        if not (day_ok and dow_ok):
            t = t.replace(hour=0, minute=0) + timedelta(days=1)
            continue
        if t.hour not in schedule.hours:
            t = t.replace(minute=0) + timedelta(hours=1)
            continue
        if t.minute not in schedule.minutes:
            t += timedelta(minutes=1)
            continue
        return t
    return None
