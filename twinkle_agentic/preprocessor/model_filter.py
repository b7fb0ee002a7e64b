"""ModelFilter: keep rows produced by allowed models only."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Any

from .base import Filter

MODEL_NOT_ALLOWED = "model_not_allowed"


class ModelFilter(Filter):
    """Keeps rows whose ``field`` (default ``model_id``) is an allowed model; else ``model_not_allowed``.

    ``allowed_models`` are exact ids, compared after stripping whitespace and, unless
    ``case_sensitive``, case-insensitively. ``patterns`` entries are regexes that must match the whole
    id (an ``re.Pattern`` or a string starting with ``re:``) or ``fnmatch`` globs (any other string).
    A missing, empty or non-string id drops. There is no implicit allow-list: give at least one of the
    two; upstream's default families are available as ``ModelFilter.UPSTREAM_DEFAULT_PATTERNS``.
    """

    # Upstream twinkle-kit's default families (router-style "org/model" ids, any suffix).
    UPSTREAM_DEFAULT_PATTERNS: tuple[str, ...] = (
        r"re:minimax/minimax-m2[-\w.]*",
        r"re:opengvlab/internvl3\.5[-\w.]*",
        r"re:qwen/qwen3-235b[-\w.]*",
        r"re:qwen/qwen3-coder[-\w.]*",
        r"re:xiaomimimo/mimo-v2[-\w.]*",
        r"re:z-ai/glm-[56][-\w.]*",
        r"re:deepseek-ai/deepseek-(?:r1|v3|v4)[-\w.]*",
        r"re:moonshotai/kimi-k2[-\w.]*",
        r"re:stepfun-ai/step[-\w.]*",
    )

    def __init__(
        self,
        allowed_models: Iterable[str] | None = None,
        patterns: Iterable[str | re.Pattern[str]] | None = None,
        field: str = "model_id",
        case_sensitive: bool = False,
    ) -> None:
        if isinstance(allowed_models, str):
            allowed_models = [allowed_models]
        if isinstance(patterns, (str, re.Pattern)):
            patterns = [patterns]
        allowed = list(allowed_models or ())
        pattern_list = list(patterns or ())
        if not allowed and not pattern_list:
            raise ValueError(
                "ModelFilter needs allowed_models=[...] (exact ids) and/or patterns=[...] (globs, 're:' "
                "regexes); for upstream's families pass patterns=ModelFilter.UPSTREAM_DEFAULT_PATTERNS"
            )
        for m in allowed:
            if not isinstance(m, str) or not m.strip():
                raise ValueError(f"allowed_models entries must be non-empty strings, got {m!r}")
        self.field = field
        self.case_sensitive = case_sensitive
        self.allowed_models = allowed
        self.patterns = pattern_list
        self._exact = {self._key(m) for m in allowed}
        flags = 0 if case_sensitive else re.IGNORECASE
        compiled = []
        for p in pattern_list:
            if isinstance(p, re.Pattern):
                compiled.append(p)
            elif isinstance(p, str) and p.startswith("re:"):
                compiled.append(re.compile(p[3:], flags))
            elif isinstance(p, str) and p:
                compiled.append(re.compile(fnmatch.translate(p), flags))
            else:
                raise ValueError(f"patterns entries must be non-empty strings or re.Pattern, got {p!r}")
        self._patterns = compiled

    def _key(self, model_id: str) -> str:
        model_id = model_id.strip()
        return model_id if self.case_sensitive else model_id.casefold()

    def allows(self, model_id: Any) -> bool:
        if not isinstance(model_id, str) or not model_id.strip():
            return False
        if self._key(model_id) in self._exact:
            return True
        stripped = model_id.strip()
        return any(p.fullmatch(stripped) for p in self._patterns)

    def reason(self, row: dict) -> str | None:
        return None if self.allows(row.get(self.field)) else MODEL_NOT_ALLOWED

    def __repr__(self) -> str:
        return f"ModelFilter(allowed_models={self.allowed_models!r}, patterns={self.patterns!r}, field={self.field!r})"
