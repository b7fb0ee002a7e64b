"""PII detection and replacement for chat rows: Presidio + spaCy + LAC + Faker, English and Chinese.

Modules: entities (vocabularies), checksums, recognizers (Presidio rule recognizers), zh_ner
(Chinese names with LAC), models (offline loading), analyzer (batched detection), marks
(recognisable replacements), fakes (seeded Faker draws), replacement (per-row consistency),
strategies, rewrite (where text lives in a row), filter (the step).
Importing this package does not import Presidio, spaCy, Faker or onnxruntime.
"""

from .filter import PIIConfigError, PIIPresidioFilter

__all__ = ["PIIConfigError", "PIIPresidioFilter"]
