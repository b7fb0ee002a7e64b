"""Conversion between the batch shapes a step may receive and a list of row dicts.

Supported shapes: a list of rows; a column dict of lists, tuples or numpy arrays (the shape of HF
``Dataset.map(batched=True)`` and Ray Data ``map_batches``); a pandas DataFrame. ``from_rows`` rebuilds
the input's shape so a batch comes back with exactly the surviving rows. ``gc_paused`` is how a
step processes a large batch without the cyclic collector walking its rows over and over.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


def plain(value: Any) -> Any:
    """Turn numpy arrays/scalars (possibly nested in lists and dicts) into plain Python values."""
    tolist = getattr(value, "tolist", None)
    if tolist is not None and type(value).__module__ == "numpy":
        value = tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _is_dataframe(batch: Any) -> bool:
    return type(batch).__name__ == "DataFrame" and hasattr(batch, "to_dict")


@dataclass
class BatchShape:
    kind: str  # 'list' | 'columns' | 'dataframe'
    keys: list[str] = field(default_factory=list)


def shape_of(batch: Any) -> BatchShape:
    if _is_dataframe(batch):
        return BatchShape("dataframe", [str(c) for c in batch.columns])
    if isinstance(batch, Mapping):
        return BatchShape("columns", list(batch.keys()))
    return BatchShape("list")


def to_rows(batch: Any) -> list:
    """Rows of any supported batch shape (a list is returned as is)."""
    if isinstance(batch, list):
        return batch
    if _is_dataframe(batch):
        return [plain(r) for r in batch.to_dict(orient="records")]
    if isinstance(batch, Mapping):
        columns = {k: plain(v) for k, v in batch.items()}
        if not columns:
            return []
        lengths = {len(v) if isinstance(v, list) else -1 for v in columns.values()}
        if len(lengths) != 1 or -1 in lengths:
            raise ValueError(
                "a column dict needs every column to be a list/tuple/array of the same length, got "
                + ", ".join(f"{k}: {type(v).__name__}" for k, v in columns.items())
            )
        n = lengths.pop()
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    if isinstance(batch, tuple):
        return list(batch)
    raise TypeError(f"expected a list of rows, a column dict or a DataFrame, got {type(batch).__name__}")


def from_rows(rows: list, shape: BatchShape) -> Any:
    """Rebuild ``shape`` from rows: input keys first in input order, then new keys in first-seen order."""
    if shape.kind == "list":
        return rows
    keys = list(shape.keys)
    seen = set(keys)
    for row in rows:
        if isinstance(row, dict):
            for k in row:
                if k not in seen:
                    seen.add(k)
                    keys.append(k)
    columns = {k: [row.get(k) if isinstance(row, dict) else None for row in rows] for k in keys}
    if shape.kind == "dataframe":
        import pandas as pd

        return pd.DataFrame(columns, columns=keys)
    return columns


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for one batch, back on (if it was) afterwards.

    A batch's rows are tens of thousands of fresh dicts and lists that stay alive until the batch is
    done, so the collector's thresholds trip over and over on objects that cannot be garbage yet (each
    full pass also scans the worker's long-lived objects). Rows hold no reference cycles: reference
    counting frees them when the batch ends, and any cyclic garbage is left to the next collection.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
