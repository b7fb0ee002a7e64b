"""PIIPresidioFilter: detect and rewrite PII in chat rows (English and Chinese), offline and batched.

A mapper: ``__call__(rows or column dict) -> (rows, [])``; rows are copied, never dropped, inputs
never mutated. One call analyses all texts of the batch together (see analyzer.py), then rewrites
each row in message order so replacements stay consistent within a conversation.

E-mail addresses at documentation domains (example.com, example.net, example.org and the reserved
``.example``/``.test``/``.invalid``/``.localhost`` names of RFC 2606 / RFC 6761) and IP addresses in
the documentation ranges (RFC 5737, RFC 3849) are left as they are, also in the input: the filter
writes its own fake addresses there, and treats any such value as one of its replacements, so a
second pass changes nothing (see marks.py). Upstream rewrites them like any other address.

The object only holds configuration and pickles cheaply; models load lazily once per process (or
eagerly in ``warmup()``), which is what the preprocess job's actor pool relies on
(``needs_actor = True``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import ConfigError
from ..base import Mapper
from ..batch import to_rows
from ..text import cjk_ratio
from .entities import DEFAULT_ENTITIES, KNOWN_ENTITIES, STRATEGIES, ZH_TEXT_CJK_RATIO
from .fakes import FakeMaker
from .rewrite import rewrite_row
from .strategies import rewrite_text

LANGUAGES = ("en", "zh")
ROLES = ("system", "user", "assistant", "tool")


class PIIConfigError(ConfigError):
    """A PIIPresidioFilter argument is invalid; the message names the argument and what is allowed."""

    def __init__(self, argument: str, value: Any, allowed: Iterable[str]) -> None:
        super().__init__(f"PIIPresidioFilter({argument}=...): {value!r} is not allowed; use one of {sorted(allowed)}")
        self.argument = argument
        self.value = value


def _check(argument: str, values: Iterable[str], allowed: Iterable[str]) -> None:
    allowed = set(allowed)
    for value in values:
        if value not in allowed:
            raise PIIConfigError(argument, value, allowed)


class PIIPresidioFilter(Mapper):
    name = "PIIPresidioFilter"
    needs_actor = True

    def __init__(
        self,
        languages: Iterable[str] = LANGUAGES,
        entities: Iterable[str] | None = None,
        ignore_entities: Iterable[str] = (),
        strategy: str = "replace",
        entity_strategy: Mapping[str, str] | None = None,
        score_threshold: float = 0.5,
        roles: Iterable[str] = ROLES,
        hash_salt: str = "",
        record_counts: bool = False,
        spacy_models: Mapping[str, str | None] | None = None,
        use_ner: bool = True,
        strict: bool = False,
    ) -> None:
        self.languages = tuple(dict.fromkeys([languages] if isinstance(languages, str) else languages))
        _check("languages", self.languages, LANGUAGES)
        if not self.languages:
            raise PIIConfigError("languages", (), LANGUAGES)
        chosen = DEFAULT_ENTITIES if entities is None else tuple(dict.fromkeys(entities))
        _check("entities", chosen, KNOWN_ENTITIES)
        ignored = frozenset(ignore_entities)
        _check("ignore_entities", ignored, KNOWN_ENTITIES)
        self.entities = tuple(e for e in chosen if e not in ignored)
        _check("strategy", [strategy], STRATEGIES)
        self.strategy = strategy
        self.entity_strategy = dict(entity_strategy or {})
        _check("entity_strategy", self.entity_strategy, KNOWN_ENTITIES)
        _check("entity_strategy", self.entity_strategy.values(), STRATEGIES)
        if not 0.0 <= float(score_threshold) <= 1.0:
            raise PIIConfigError("score_threshold", score_threshold, ["a number in [0, 1]"])
        self.score_threshold = float(score_threshold)
        self.roles = tuple([roles] if isinstance(roles, str) else roles)
        self.hash_salt = str(hash_salt)
        self.record_counts = bool(record_counts)
        self.spacy_models = dict(spacy_models or {})
        _check("spacy_models", self.spacy_models, LANGUAGES)
        self.use_ner = bool(use_ner)
        self.strict = bool(strict)

    # -- lazily built, per process ---------------------------------------------------------------
    def _analyzer(self):
        from .analyzer import AnalyzerConfig, get_analyzer

        return get_analyzer(
            AnalyzerConfig(
                languages=self.languages,
                entities=self.entities,
                score_threshold=self.score_threshold,
                spacy_models=tuple(sorted(self.spacy_models.items())),
                use_ner=self.use_ner,
                strict=self.strict,
            )
        )

    def _maker(self) -> FakeMaker:
        return _makers.setdefault(self.hash_salt, FakeMaker(self.hash_salt))

    def warmup(self) -> None:
        """Load every model now (spaCy, LAC, Presidio recognizers, Faker) instead of on first call."""
        self._analyzer().load()
        from .fakes import LOCALES, faker_for

        for locale in LOCALES:
            faker_for(locale)

    # -- the step --------------------------------------------------------------------------------
    def __call__(self, rows: Any) -> tuple[list, list]:
        return self.map_rows(to_rows(rows)), []

    def map_row(self, row: dict) -> dict:
        return self.map_rows([row])[0]

    def map_rows(self, rows: list) -> list:
        texts: list[str] = []

        def collect(text: str) -> str:
            texts.append(text)
            return text

        for row in rows:
            if isinstance(row, dict):
                rewrite_row(row, self.roles, collect)
        spans_of = dict(zip(texts, self._analyzer().analyze(texts), strict=True)) if texts else {}
        maker = self._maker()
        return [self._rewrite(row, spans_of, maker) if isinstance(row, dict) else row for row in rows]

    def _rewrite(self, row: dict, spans_of: dict, maker: FakeMaker) -> dict:
        from .replacement import RowReplacer

        replacer = RowReplacer(maker)
        hits: Counter | None = Counter() if self.record_counts else None

        def rewrite(text: str) -> str:
            spans = spans_of.get(text, ())
            if not spans:
                return text
            zh = cjk_ratio(text) > ZH_TEXT_CJK_RATIO
            return rewrite_text(text, spans, self.entity_strategy, self.strategy, replacer, zh, hits)

        out = rewrite_row(row, self.roles, rewrite)
        if hits is not None:
            out["_pii_hits"] = dict(sorted(hits.items()))
        return out

    def __repr__(self) -> str:
        return (
            f"PIIPresidioFilter(languages={self.languages!r}, entities={len(self.entities)}, "
            f"strategy={self.strategy!r}, use_ner={self.use_ner})"
        )


_makers: dict[str, FakeMaker] = {}
