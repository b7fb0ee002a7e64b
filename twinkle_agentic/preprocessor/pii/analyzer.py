"""Batched PII detection: Presidio recognizers on NLP artifacts computed once per batch.

``PiiAnalyzer.analyze(texts)`` returns the resolved spans of every text. Per batch it

1. answers repeated texts (system prompts, tool outputs) from a bounded LRU cache;
2. skips texts that cannot hold a configured entity (see ``TRIGGERS``: e-mail needs '@', numbers
   need a digit, English NER spans need a capital letter, Chinese NER needs CJK). The rules are
   exact: a span of that entity can never come out of a text without its trigger, because the NER
   post-filter drops English PERSON/LOCATION spans without a capital letter;
3. runs spaCy over all remaining texts of a language with ``nlp.pipe`` (NER only; no parser,
   tagger or lemmatizer) and LAC over all their Chinese sentences in padded batches;
4. calls Presidio's ``AnalyzerEngine.analyze`` per text on those precomputed ``NlpArtifacts``;
5. applies cue words, vetoes, NER post-filters, minimum lengths and the threshold, then resolves
   overlaps greedily by (-score, -length, start), a valid CN_ID beating cards and phones.

The analyzer is built once per process per configuration (``get_analyzer``).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..text import cjk_ratio
from .en_ner import clean_english_ner
from .entities import (
    CONTEXT_BOOST,
    CONTEXT_CUES,
    CONTEXT_WINDOW_CHARS,
    DEFAULT_MIN_SPAN_LENGTH,
    MIN_CJK_SPAN_LENGTH,
    MIN_SPAN_LENGTH,
    NEGATIVE_CUES,
    NER_ENTITIES,
    SCORES,
    SPACY_LABELS,
    ZH_TEXT_CJK_RATIO,
)

CACHE_MAX_ENTRIES = 16384
CACHE_MAX_TEXT_CHARS = 8192
NLP_BATCH_SIZE = 64

_DIGIT = re.compile(r"\d")
_MARKUP_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9_-]{0,30}/?>")
_UPPER = re.compile(r"[A-Z]")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_LETTER = re.compile(r"[^\W\d_]")
# Which characters a text needs before an entity can be found in it (see the module docstring).
TRIGGERS: dict[str, re.Pattern] = {
    "EMAIL_ADDRESS": re.compile("@"),
    "IP_ADDRESS": re.compile(r"[\d:]"),
    "URL": re.compile(r"[.:]"),
    "CN_ADDRESS": re.compile(r"[\u4e00-\u9fff]"),
    "ORGANIZATION": _LETTER,
    "NRP": _LETTER,
    "DATE_TIME": re.compile(r"[^\W_]"),
}
_DIGIT_TRIGGERED = ("PHONE_NUMBER", "CN_PHONE", "CN_LANDLINE", "CN_ID", "CN_BANK", "CREDIT_CARD", "US_SSN",
                    "IBAN_CODE", "STREET_ADDRESS")
_NAME_TRIGGER = re.compile(r"[A-Z\u4e00-\u9fff]")

@dataclass(frozen=True)
class Span:
    entity: str
    start: int
    end: int
    score: float


@dataclass(frozen=True)
class AnalyzerConfig:
    languages: tuple[str, ...]
    entities: tuple[str, ...]
    score_threshold: float
    spacy_models: tuple[tuple[str, str | None], ...]
    use_ner: bool
    strict: bool


class LruCache:
    """A bounded mapping that forgets the least recently used entry."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._data: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._data.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


# Cue words: ASCII ones must start a word ("tel" in "tel:" or "telephone", not in "hotel"),
# CJK ones match anywhere.
_CUES = {
    entity: re.compile(
        "|".join(rf"\b{re.escape(c)}" if c.isascii() else re.escape(c) for c in cues), re.IGNORECASE
    )
    for entity, cues in CONTEXT_CUES.items()
}


def _blank(match: re.Match) -> str:
    return " " * len(match.group())


def text_language(text: str, languages: tuple[str, ...]) -> str:
    if len(languages) == 1:
        return languages[0]
    return "zh" if cjk_ratio(text) > ZH_TEXT_CJK_RATIO else "en"


def _triggered(entity: str, text: str) -> bool:
    if entity in _DIGIT_TRIGGERED:
        return _DIGIT.search(text) is not None
    if entity in ("PERSON", "LOCATION"):
        return _NAME_TRIGGER.search(text) is not None
    return TRIGGERS[entity].search(text) is not None


def min_length(text: str, span: Span) -> int:
    if span.entity in MIN_CJK_SPAN_LENGTH and _CJK.match(text, span.start):
        return MIN_CJK_SPAN_LENGTH[span.entity]
    return MIN_SPAN_LENGTH.get(span.entity, DEFAULT_MIN_SPAN_LENGTH)


class PiiAnalyzer:
    """Detection for one configuration. ``load()`` builds models; ``analyze()`` is batched."""

    def __init__(self, config: AnalyzerConfig) -> None:
        self.config = config
        self.cache = LruCache(CACHE_MAX_ENTRIES)
        self._loaded = False
        self._lock = threading.Lock()
        self._negative = {e: re.compile(p, re.IGNORECASE) for e, p in NEGATIVE_CUES.items()}

    # -- construction ----------------------------------------------------------------------------
    def load(self) -> None:
        with self._lock:
            if not self._loaded:
                self._build()
                self._loaded = True

    def _build(self) -> None:
        from .models import presidio_without_transformers

        with presidio_without_transformers():
            self._build_engine()

    def _build_engine(self) -> None:
        from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
        from presidio_analyzer.context_aware_enhancers import LemmaContextAwareEnhancer
        from presidio_analyzer.nlp_engine import NerModelConfiguration, SpacyNlpEngine
        from presidio_analyzer.predefined_recognizers import SpacyRecognizer

        from .models import DEFAULT_SPACY_MODELS, load_chinese_ner, load_spacy
        from .name_rules import NAME_CUE_RECOGNIZERS
        from .recognizers import pattern_recognizers

        cfg = self.config
        wanted = set(cfg.entities)
        ner_wanted = sorted(wanted & NER_ENTITIES) if cfg.use_ner else []
        models = {**DEFAULT_SPACY_MODELS, **dict(cfg.spacy_models)}
        self.pipelines = {
            lang: load_spacy(lang, models.get(lang), bool(ner_wanted), cfg.strict) for lang in cfg.languages
        }
        self.chinese_ner = None
        lac_entities = wanted & {"PERSON", "LOCATION"} if cfg.use_ner else set()
        if lac_entities:
            self.chinese_ner = load_chinese_ner(cfg.strict)
        self.lac_entities = frozenset(lac_entities if self.chinese_ner is not None else ())

        labels = {label: entity for label, entity in SPACY_LABELS.items() if entity in wanted}
        ner_config = NerModelConfiguration(
            model_to_presidio_entity_mapping=labels,
            labels_to_ignore=[],
            default_score=SCORES["NER"],
        )
        self.nlp_engine = SpacyNlpEngine(
            models=[{"lang_code": lang, "model_name": str(models.get(lang))} for lang in cfg.languages],
            ner_model_configuration=ner_config,
        )
        self.nlp_engine.nlp = {lang: p.nlp for lang, p in self.pipelines.items()}  # never .load(): no download
        self.labels = labels

        recognizers = []
        self.presidio_entities: dict[str, tuple[str, ...]] = {}
        for lang in cfg.languages:
            lang_recognizers = pattern_recognizers(lang, cfg.entities)
            if self.pipelines[lang].has_ner and ner_wanted:
                lang_recognizers.append(SpacyRecognizer(supported_language=lang, supported_entities=ner_wanted))
            if "PERSON" in ner_wanted and (self.chinese_ner is not None or any(p.has_ner for p in self.pipelines.values())):
                lang_recognizers.extend(cls(supported_language=lang) for cls in NAME_CUE_RECOGNIZERS)
            recognizers.extend(lang_recognizers)
            supported = {e for r in lang_recognizers for e in r.supported_entities}
            self.presidio_entities[lang] = tuple(e for e in cfg.entities if e in supported)
        registry = RecognizerRegistry(recognizers=recognizers, supported_languages=list(cfg.languages))
        # Whole-word context matching: Presidio's default substring mode finds "tel" in "approximately".
        self.engine = AnalyzerEngine(
            registry=registry,
            nlp_engine=self.nlp_engine,
            supported_languages=list(cfg.languages),
            context_aware_enhancer=LemmaContextAwareEnhancer(context_matching_mode="whole_word"),
        )
        for recognizer in recognizers:
            recognizer.load()

    # -- analysis --------------------------------------------------------------------------------
    def may_hold_pii(self, text: str) -> bool:
        return len(text) >= 2 and any(_triggered(e, text) for e in self.config.entities)

    def analyze(self, texts: list[str]) -> list[tuple[Span, ...]]:
        """Resolved spans for each text (same order), using and filling the cache."""
        self.load()
        found: dict[str, tuple[Span, ...]] = {}
        todo: list[str] = []
        for text in texts:
            if text in found:
                continue
            if not self.may_hold_pii(text):
                found[text] = ()
                continue
            cached = self.cache.get(text) if len(text) <= CACHE_MAX_TEXT_CHARS else None
            if cached is not None:
                found[text] = cached
            else:
                found[text] = ()
                todo.append(text)
        for text, spans in zip(todo, self._analyze_uncached(todo), strict=True):
            found[text] = spans
            if len(text) <= CACHE_MAX_TEXT_CHARS:
                self.cache.put(text, spans)
        return [found[t] for t in texts]

    def _analyze_uncached(self, texts: list[str]) -> list[tuple[Span, ...]]:
        if not texts:
            return []
        # Markup tags (<think>, </tool_call>) become spaces of the same length: offsets are kept and
        # NER no longer reads "<think>user" as one token.
        texts = [_MARKUP_TAG.sub(_blank, t) if "<" in t else t for t in texts]
        by_lang: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            by_lang.setdefault(text_language(text, self.config.languages), []).append(i)
        artifacts: list = [None] * len(texts)
        for lang, idx in by_lang.items():
            for i, art in zip(idx, self._artifacts(lang, [texts[i] for i in idx]), strict=True):
                artifacts[i] = (lang, art)
        lac_spans: list[list] = [[] for _ in texts]
        if self.chinese_ner is not None:
            need = [i for i, t in enumerate(texts) if _CJK.search(t)]
            for i, spans in zip(need, self.chinese_ner.find([texts[i] for i in need], self.lac_entities),
                                strict=True):
                lac_spans[i] = spans
        out = []
        for text, (lang, art), extra in zip(texts, artifacts, lac_spans, strict=True):
            spans = self._presidio(text, lang, art)
            spans.extend(Span(s.entity, s.start, s.end, s.score) for s in extra)
            out.append(self._resolve(text, spans))
        return out

    def _artifacts(self, lang: str, texts: list[str]) -> list:
        """NlpArtifacts per text: NER docs from one ``nlp.pipe`` for texts with a capital letter,
        tokenizer-only docs for the rest (their NER spans would be dropped anyway)."""
        from presidio_analyzer.nlp_engine import NlpArtifacts
        from spacy.tokens import Span as SpacySpan

        pipeline = self.pipelines[lang]
        nlp = pipeline.nlp
        docs: list = [None] * len(texts)
        ner_idx = [i for i, t in enumerate(texts) if pipeline.has_ner and _UPPER.search(t)]
        for i, doc in zip(ner_idx, nlp.pipe((texts[i] for i in ner_idx), batch_size=NLP_BATCH_SIZE), strict=True):
            docs[i] = doc
        for i, text in enumerate(texts):
            if docs[i] is None:
                docs[i] = nlp.make_doc(text)
        out = []
        for doc in docs:
            entities = [
                SpacySpan(doc, ent.start, ent.end, label=self.labels[ent.label_])
                for ent in doc.ents
                if ent.label_ in self.labels
            ]
            out.append(
                NlpArtifacts(
                    entities=entities,
                    tokens=doc,
                    tokens_indices=[t.idx for t in doc],
                    lemmas=[t.lemma_ or t.lower_ for t in doc],
                    nlp_engine=self.nlp_engine,
                    language=lang,
                    scores=[SCORES["NER"]] * len(entities),
                )
            )
        return out

    def _presidio(self, text: str, lang: str, artifacts) -> list[Span]:
        from presidio_analyzer import RecognizerResult

        entities = [e for e in self.presidio_entities[lang] if _triggered(e, text)]
        if not entities:
            return []
        results = self.engine.analyze(
            text=text, language=lang, entities=entities, nlp_artifacts=artifacts, score_threshold=0.0
        )
        spans = []
        for r in results:
            span = Span(r.entity_type, r.start, r.end, r.score)
            meta = r.recognition_metadata or {}
            if span.entity in self._negative and self._negative[span.entity].search(
                text[max(0, span.start - CONTEXT_WINDOW_CHARS) : span.start]
            ):
                continue
            if span.entity in CONTEXT_CUES and not meta.get(RecognizerResult.IS_SCORE_ENHANCED_BY_CONTEXT_KEY):
                span = self._with_context(text, span)
            if (
                lang == "en"
                and span.entity in ("PERSON", "LOCATION")
                and meta.get(RecognizerResult.RECOGNIZER_NAME_KEY) == "SpacyRecognizer"
            ):
                span = clean_english_ner(text, span)
                if span is None:
                    continue
            spans.append(span)
        return spans

    @staticmethod
    def _with_context(text: str, span: Span) -> Span:
        before = text[max(0, span.start - CONTEXT_WINDOW_CHARS) : span.start]
        if _CUES[span.entity].search(before):
            return Span(span.entity, span.start, span.end, min(1.0, span.score + CONTEXT_BOOST))
        return span

    def _resolve(self, text: str, spans: list[Span]) -> tuple[Span, ...]:
        threshold = self.config.score_threshold
        kept = [s for s in spans if s.score >= threshold and s.end - s.start >= min_length(text, s)]
        ids = [s for s in kept if s.entity == "CN_ID"]
        if ids:
            kept = [
                s
                for s in kept
                if s.entity not in ("CN_BANK", "CREDIT_CARD", "PHONE_NUMBER", "US_SSN")
                or not any(i.start < s.end and s.start < i.end for i in ids)
            ]
        chosen: list[Span] = []
        for s in sorted(kept, key=lambda s: (-s.score, -(s.end - s.start), s.start, s.entity)):
            if all(s.end <= c.start or c.end <= s.start for c in chosen):
                chosen.append(s)
        return tuple(sorted(chosen, key=lambda s: s.start))


_analyzers: dict[AnalyzerConfig, PiiAnalyzer] = {}
_analyzers_lock = threading.Lock()


def get_analyzer(config: AnalyzerConfig) -> PiiAnalyzer:
    """The process's analyzer for ``config`` (built on first use, shared by equal configurations)."""
    with _analyzers_lock:
        analyzer = _analyzers.get(config)
        if analyzer is None:
            analyzer = _analyzers[config] = PiiAnalyzer(config)
    return analyzer
