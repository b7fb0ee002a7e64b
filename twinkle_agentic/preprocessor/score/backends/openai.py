"""``OpenAIBackend``: scorer backend on an OpenAI-compatible server that returns prompt logprobs (vLLM).

Endpoints: ``/tokenize`` and ``/detokenize`` (vLLM extensions, at the server root), ``/v1/completions``
with a token-id prompt and ``prompt_logprobs=1``, ``/v1/chat/completions`` and ``/v1/embeddings``
(optionally on another server: ``embed_base_url``/``embed_model``). HTTP goes through the ``openai``
client (imported lazily); clients are built on first use, so the backend pickles as its settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import (
    BackendError,
    ScoreBackend,
    TokenLogprobs,
    call_or_none,
    chunks,
    isolate_failures,
    read_or_none,
)


def server_root(base_url: str) -> str:
    """``http://host:port`` from ``http://host:port`` or ``http://host:port/v1`` (trailing slashes ignored)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class OpenAIBackend(ScoreBackend):
    """Backend on an OpenAI-compatible server. ``base_url`` may be the server root or its ``/v1``.

    ``max_batch_size`` bounds the prompts per completions request; ``max_concurrency`` bounds the
    chat requests in flight (one request per conversation, ``n`` samples each); ``max_retries``
    applies to every request (connection errors, 429 and 5xx).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        embed_base_url: str | None = None,
        embed_model: str | None = None,
        timeout: float = 120,
        *,
        max_batch_size: int | None = 64,
        max_concurrency: int = 8,
        max_retries: int = 2,
    ) -> None:
        if not base_url or not model:
            raise ValueError("OpenAIBackend needs base_url (e.g. 'http://127.0.0.1:8000') and model")
        self.root = server_root(base_url)
        self.model = model
        self.api_key = api_key or "EMPTY"
        self.embed_root = server_root(embed_base_url) if embed_base_url else self.root
        self.embed_model = embed_model or model
        self.timeout = timeout
        self.max_batch_size = max_batch_size
        self.max_concurrency = max(1, max_concurrency)
        self.max_retries = max_retries
        self._clients: dict[str, Any] = {}
        self._chat_api: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_clients": {}, "_chat_api": None}

    def _client(self, root: str) -> Any:
        client = self._clients.get(root)
        if client is None:
            import openai

            client = openai.OpenAI(
                base_url=root + "/v1",
                api_key=self.api_key,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
            self._clients[root] = client
        return client

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST a JSON body to ``<root><path>`` (outside ``/v1``) through the openai client."""
        return self._client(self.root).post(self.root + path, cast_to=object, body=body)

    @property
    def chat_api(self) -> Any:
        """The project's OpenAI protocol client: it sanitises messages the way every request must be."""
        if self._chat_api is None:
            from ....protocol.openai import OpenAI

            self._chat_api = OpenAI(
                self.model,
                api_key=self.api_key,
                base_url=self.root + "/v1",
                client_kwargs={"timeout": self.timeout, "max_retries": self.max_retries},
            )
        return self._chat_api

    def warmup(self) -> None:
        self.encode_text("warm up")

    # -- ScoreBackend -------------------------------------------------------------------------

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        from ....protocol.openai_payload import sanitize_messages

        body: dict[str, Any] = {
            "model": self.model,
            "messages": sanitize_messages(messages),
            "add_generation_prompt": True,
            "add_special_tokens": False,
        }
        if tools:
            body["tools"] = tools
        return self._tokens(self._post("/tokenize", body))

    def encode_text(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        return self._tokens(self._post("/tokenize", body))

    @staticmethod
    def _tokens(data: Any) -> list[int]:
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(f"/tokenize answered without a token list: {str(data)[:200]}")
        return [int(t) for t in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        data = self._post("/detokenize", {"model": self.model, "tokens": [int(t) for t in ids]})
        if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
            raise BackendError(f"/detokenize answered without a prompt: {str(data)[:200]}")
        return data["prompt"]

    def prompt_logprobs(self, ids_batch: list[list[int]]) -> list[TokenLogprobs | None]:
        def call(batch: list[list[int]]) -> list[TokenLogprobs | None]:
            response = self._client(self.root).completions.create(
                model=self.model,
                prompt=[[int(t) for t in ids] for ids in batch],
                max_tokens=1,
                temperature=0.0,
                extra_body={"prompt_logprobs": 1},
            )
            choices = sorted(response.choices, key=lambda c: c.index)
            if len(choices) != len(batch):
                raise BackendError(
                    f"/v1/completions returned {len(choices)} choices for {len(batch)} prompts"
                )
            return [
                read_or_none((choice.model_extra or {}).get("prompt_logprobs"), ids, "prompt_logprobs")
                for choice, ids in zip(choices, batch, strict=True)
            ]

        out: list[TokenLogprobs | None] = []
        for chunk in chunks(ids_batch, self.max_batch_size):
            out.extend(isolate_failures(call, chunk, "prompt_logprobs"))
        return out

    def chat(
        self, batch: list[list[dict]], n: int, temperature: float, max_tokens: int
    ) -> list[list[str] | None]:
        from ....data_format import SamplingParams

        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, num_samples=n)

        def one(messages: list[dict]) -> list[str]:
            reply = self.chat_api({"messages": messages}, params)
            replies = reply if isinstance(reply, list) else [reply]
            return [r.get("content") or "" for r in replies]

        with ThreadPoolExecutor(min(self.max_concurrency, max(1, len(batch)))) as pool:
            return list(pool.map(lambda m: call_or_none(lambda: one(m), "chat"), batch))

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        response = self._client(self.embed_root).embeddings.create(model=self.embed_model, input=list(texts))
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise BackendError(f"/v1/embeddings returned {len(data)} vectors for {len(texts)} texts")
        return [list(d.embedding) for d in data]

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.root!r}, model={self.model!r})"
