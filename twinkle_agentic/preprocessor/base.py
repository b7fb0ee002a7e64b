"""The step contract every filter and mapper follows.

A step takes rows (a list of dicts, or a column dict) and returns ``(kept, dropped)``. Dropped rows
are shallow copies carrying ``drop_reason``; kept rows never carry one; inputs are never mutated. A
filter only implements ``reason(row)``; a mapper only implements ``map_row(row)``.
"""

from __future__ import annotations

from typing import Any

from .batch import to_rows

INVALID_ROW = "invalid_row"
INVALID_MESSAGES = "invalid_messages"


def drop(row: Any, reason: str) -> dict:
    """A shallow copy of ``row`` with ``drop_reason`` set (non-dict rows are wrapped)."""
    copy = dict(row) if isinstance(row, dict) else {"row": row}
    copy["drop_reason"] = reason
    return copy


class Filter:
    """Base class for filters: subclasses implement ``reason(row) -> str | None`` (None keeps)."""

    name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = cls.__name__

    def reason(self, row: dict) -> str | None:
        raise NotImplementedError

    def reasons(self, rows: list[dict]) -> list[str | None]:
        """``reason`` of every row; filters that share work across a batch override this."""
        return [self.reason(row) for row in rows]

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        kept: list[dict] = []
        dropped: list[dict] = []
        rows = to_rows(rows)
        verdicts = iter(self.reasons([row for row in rows if isinstance(row, dict)]))
        for row in rows:
            if not isinstance(row, dict):
                dropped.append(drop(row, INVALID_ROW))
                continue
            why = next(verdicts)
            if why is None:
                if "drop_reason" in row:
                    row = {k: v for k, v in row.items() if k != "drop_reason"}
                kept.append(row)
            else:
                dropped.append(drop(row, why))
        return kept, dropped

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Mapper:
    """Base class for mappers: subclasses implement ``map_row(row) -> row`` and never drop."""

    name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = cls.__name__

    def map_row(self, row: dict) -> dict:
        raise NotImplementedError

    def __call__(self, rows: Any) -> tuple[list[dict], list[dict]]:
        return [self.map_row(row) if isinstance(row, dict) else row for row in to_rows(rows)], []

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
