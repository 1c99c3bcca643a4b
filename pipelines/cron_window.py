"""A cron expression used as a time window: rounds may start only in minutes the expression matches.

`"* 22-23,0-5 * * *"` means "any minute from 22:00 to 05:59". Five fields (minute, hour, day of month,
month, day of week with 0 = Sunday), each `*`, a number, a range `a-b`, a list `a,b` or a step `*/n`
or `a-b/n`. Times are UTC.
"""

from __future__ import annotations

from datetime import datetime

_FIELDS = [("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 6)]


def _expand(field: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            start, end = low, high
        elif "-" in span:
            start, end = (int(x) for x in span.split("-"))
        else:
            start = end = int(span)
        if not (low <= start <= high and low <= end <= high) or step < 1:
            raise ValueError(f"cron field {field!r} is outside {low}..{high}")
        values |= (
            set(range(start, end + 1, step))
            if start <= end
            else set(range(start, high + 1, step)) | set(range(low, end + 1, step))
        )
    return values


def parse_window(expression: str) -> list[set[int]]:
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron window {expression!r} needs 5 fields (minute hour day month weekday)")
    return [_expand(f, low, high) for f, (_, low, high) in zip(fields, _FIELDS, strict=True)]


def in_window(expression: str | None, now: datetime) -> bool:
    """True when `now` falls in a minute the expression matches (always True without an expression)."""
    if not expression:
        return True
    minute, hour, day, month, weekday = parse_window(expression)
    return (
        now.minute in minute
        and now.hour in hour
        and now.day in day
        and now.month in month
        and (now.weekday() + 1) % 7 in weekday
    )
