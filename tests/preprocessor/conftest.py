"""Fixtures of the preprocessor tests (row builders live in tests/support/preprocessor_rows.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def verdict():
    """verdict(filter, row) -> drop reason or None, through the filter's public __call__."""

    def run(f, r):
        kept, dropped = f([r])
        assert len(kept) + len(dropped) == 1
        return dropped[0]["drop_reason"] if dropped else None

    return run
