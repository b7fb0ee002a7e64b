"""Where the checkout is, so tests find its data and configs however deep their folder is."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
