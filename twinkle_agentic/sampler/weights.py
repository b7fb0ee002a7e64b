"""New policy weights for a running vLLM engine: payload checks, buckets and the worker-side loader.

Both samplers' ``update_weights`` go through this module, so a payload is checked and sent the same
way whichever engine holds the weights. Every update is ``collective_rpc`` calls to
``WeightLoaderExtension`` (the ``worker_extension_cls`` every sampler engine starts with): a start,
the loads, a finish. The loads per payload:

- a checkpoint directory (Hugging Face layout, ``*.safetensors``) is checked from the files'
  headers, then each engine worker reads the files itself: one load call; the directory must be on
  storage the engine's node sees;
- in-memory tensors (a mapping or an iterable of ``(name, torch.Tensor)``) are checked, copied to
  CPU and packed into safetensors buckets of about ``bucket_bytes``: one load call per bucket, so
  the number of calls grows with the model's bytes, not its parameter count.

- an update a trainer broadcasts over a transfer group (``transfer_update``; vLLM's ``nccl`` engine on
  GPUs, ``gloo`` from ``twinkle_agentic.sampler.transfer`` on CPUs): one receive call, in which the
  worker's vLLM transfer engine loads the tensors as they arrive.

The worker loads through vLLM's layerwise reload (``vllm.model_executor.model_loader.reload``) and the
model's own ``load_weights`` (checkpoint names, stacked qkv and gate-up projections, tensor-parallel
shards), then re-applies the backend's kernel processing (``loader_extension.py``).

Requests in flight when an update arrives (``on_update``): ``finish`` lets them complete on the old
weights; ``abort_and_resume`` stops them, keeps the tokens generated so far and continues each one
under the new weights (the async sampler mid-request; the offline engine of ``VLLMSampler`` only
between ``sample`` calls, which it never interrupts). Every sampled sequence says which version
generated which of its tokens (``SampledSequence.policy_versions``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twinkle_agentic.errors import ConfigError

LOADER_EXTENSION = "twinkle_agentic.sampler.loader_extension.WeightLoaderExtension"
LOAD_CHECKPOINT = "twinkle_load_checkpoint"
LOAD_BUCKET = "twinkle_load_bucket"
START_UPDATE = "twinkle_start_update"
RECEIVE_TRANSFER = "twinkle_receive_transfer"
FINISH_UPDATE = "twinkle_finish_update"
DEFAULT_BUCKET_BYTES = 256 * 1024 * 1024
TIED_HEAD = "lm_head.weight"
FINISH = "finish"
ABORT_AND_RESUME = "abort_and_resume"
ON_UPDATE_MODES = (FINISH, ABORT_AND_RESUME)

Shapes = dict[str, tuple[int, ...]]


class WeightUpdateError(ConfigError):
    """A weight update was refused before anything was loaded; the message names the tensor or setting."""


class ServedWeights:
    """What both samplers keep about the weights their engine serves: the policy version and the
    checkpoint's tensor shapes every update must match. A host sets ``config`` (its
    ``VLLMEngineConfig``) and ``max_model_len``."""

    config: Any
    max_model_len: int
    _policy_version: int = 0
    _shapes: Shapes | None = None
    _update_lock: threading.Lock
    last_update: UpdateTimings | None = None

    def ready(self) -> dict[str, Any]:
        """What a driver checks before sending work: the model, its context length, the device and the
        policy version of the weights it serves."""
        from vllm.platforms import current_platform

        return {
            "model": self.config.model,
            "max_model_len": self.max_model_len,
            "device": current_platform.device_type,
            "policy_version": self._policy_version,
        }

    @property
    def policy_version(self) -> int:
        """0 for the weights the engine started with, then the version each ``update_weights`` returned."""
        return self._policy_version

    def checkpoint_shapes(self) -> Shapes:
        """Names and shapes of the engine's checkpoint tensors, which every update must match."""
        if self._shapes is None:
            self._shapes = checkpoint_shapes(model_directory(self.config.model))
        return self._shapes

    def update_weights(
        self,
        weights: Any,
        *,
        version: int | None = None,
        on_update: str = FINISH,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> int:
        """Load new policy weights into the running engine and return the new policy version.

        ``weights`` is a checkpoint directory or in-memory tensors (this module's docstring says which
        path each takes). The payload is checked and packed on the caller's thread first: a missing,
        extra or misshaped tensor raises ``WeightUpdateError`` and the engine keeps its weights. After
        loading, the prefix cache is reset so no KV computed by the old weights is reused. Updates
        run one at a time; ``on_update`` says what happens to requests in flight.
        """
        update = prepare_update(weights, self.checkpoint_shapes(), bucket_bytes=bucket_bytes)
        return self.apply_update(update, version=version, on_update=on_update)

    def apply_update(self, update: WeightUpdate, *, version: int | None = None, on_update: str = FINISH) -> int:
        """``update_weights`` for a payload already checked by ``prepare_update`` (a farm checks and packs
        once for all its engines); its timings are kept in ``last_update``."""
        check_on_update(on_update)
        with self._update_lock:
            new_version = next_version(self._policy_version, version)
            self.last_update = self._load(update, new_version, on_update)
        return new_version

    def _load(self, update: WeightUpdate, version: int, on_update: str) -> UpdateTimings:
        """Run ``update``'s start, load and finish calls on the engine, reset its prefix cache and start
        serving ``version``; ``on_update`` as in ``update_weights``."""
        raise NotImplementedError

    def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        """Join a trainer's process group through the engine's vLLM transfer engine (the engine must be
        started with ``weight_transfer``); blocks until every member has joined. Updates sent over the
        group then arrive as ``transfer_update(...)`` payloads."""
        if not self.config.weight_transfer:
            raise WeightUpdateError(
                "this engine was started without weight_transfer; set weight_transfer='gloo' (CPU) or 'nccl' (GPU) "
                "in its config to receive weights over a trainer's process group"
            )
        self._engine_rpc("init_weight_transfer_engine", {"init_info": dict(init_info)})

    def close_weight_transfer(self) -> None:
        """Leave the trainer's process group (before a new group is formed); the engine keeps serving."""
        if self.config.weight_transfer:
            self._engine_rpc("shutdown_weight_transfer_engine", {})

    def _engine_rpc(self, method: str, kwargs: dict[str, Any]) -> Any:
        """``collective_rpc`` on the engine's workers, from any thread."""
        raise NotImplementedError


@dataclass(frozen=True)
class UpdateTimings:
    """Where one engine's update went: ``drain_s`` waiting for (or stopping) the generation in flight,
    ``load_s`` the engine calls that load the tensors, ``reset_s`` the prefix-cache reset, ``paused_s``
    how long the engine took no generation (drain excluded for ``finish``, whose requests keep running),
    ``rpc_calls`` the engine calls made."""

    drain_s: float
    load_s: float
    reset_s: float
    paused_s: float
    rpc_calls: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "drain_s": round(self.drain_s, 6),
            "load_s": round(self.load_s, 6),
            "reset_s": round(self.reset_s, 6),
            "paused_s": round(self.paused_s, 6),
            "rpc_calls": self.rpc_calls,
        }


class Stopwatch:
    """Seconds since the last ``lap`` (the phases of an update, one after another)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        return elapsed


def check_on_update(on_update: str) -> str:
    if on_update not in ON_UPDATE_MODES:
        raise WeightUpdateError(
            f"on_update must be one of {list(ON_UPDATE_MODES)}, got {on_update!r}"
        )
    return on_update


def with_loader_extension(engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The engine arguments with this module's worker extension, which ``update_weights`` calls."""
    current = engine_kwargs.get("worker_extension_cls")
    if current not in (None, "", LOADER_EXTENSION):
        raise WeightUpdateError(
            f"engine_kwargs.worker_extension_cls is {current!r}, but the samplers load new weights through "
            f"{LOADER_EXTENSION!r}, which they set themselves; drop the setting"
        )
    return {**engine_kwargs, "worker_extension_cls": LOADER_EXTENSION}


def safetensors_files(directory: Path) -> list[Path]:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise WeightUpdateError(
            f"{directory} holds no *.safetensors files; pass a Hugging Face checkpoint directory saved with "
            "safetensors (save_pretrained(..., safe_serialization=True)) or the tensors themselves"
        )
    return files


def checkpoint_shapes(directory: str | os.PathLike[str]) -> Shapes:
    """Tensor names and shapes of a safetensors checkpoint, read from the file headers only."""
    from safetensors import safe_open

    shapes: Shapes = {}
    for file in safetensors_files(Path(directory)):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not iterable
                shapes[name] = tuple(f.get_slice(name).get_shape())
    return shapes


def model_directory(model: str) -> Path:
    """The local directory of the engine's model: the path itself, or its Hugging Face cache snapshot."""
    path = Path(model)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(model, allow_patterns=["*.safetensors", "*.json"], local_files_only=True)
        )
    except Exception as exc:
        raise WeightUpdateError(
            f"cannot read the parameter names of model {model!r} (no local directory or cached snapshot): {exc}; "
            "start the sampler from a local checkpoint directory to update its weights"
        ) from exc


@dataclass(frozen=True)
class WeightUpdate:
    """A checked payload as the worker calls that load it: ``(method, args)`` pairs for ``collective_rpc``.

    ``loads`` go between the ``START_UPDATE`` and ``FINISH_UPDATE`` calls; the finish call runs even when
    a load fails, so no layer is left without weights.
    """

    loads: list[tuple[str, tuple[Any, ...]]]
    tensors: int

    @property
    def rpc_calls(self) -> int:
        """Engine calls one update makes: start, one per load, finish."""
        return len(self.loads) + 2

    @property
    def nbytes(self) -> int:
        """Bytes this payload carries (the packed buckets; a checkpoint directory carries its path)."""
        return sum(len(arg) for _, args in self.loads for arg in args if isinstance(arg, bytes | bytearray))


def check_names_and_shapes(expected: Shapes, got: Shapes) -> None:
    """Refuse a payload whose tensor names or shapes differ from the engine's checkpoint, naming them."""
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    misshaped = [
        f"{n} {list(got[n])} (expected {list(expected[n])})"
        for n in sorted(got)
        if n in expected and got[n] != expected[n]
    ]
    problems = []
    if missing:
        problems.append(f"missing tensor(s): {', '.join(missing)}")
    if extra:
        problems.append(f"tensor(s) the model does not have: {', '.join(extra)}")
    if misshaped:
        problems.append(f"misshaped tensor(s): {'; '.join(misshaped)}")
    if problems:
        raise WeightUpdateError(
            "weight update refused, the engine keeps its current weights: "
            + "; ".join(problems)
            + ". Send every tensor of the model's checkpoint under its checkpoint name and shape"
        )


def drop_tied_head(expected: Shapes, got: Shapes) -> set[str]:
    """A trainer's ``state_dict`` of a tied-embedding model also holds ``lm_head.weight``, the embedding
    itself; a checkpoint without it cannot take it, so it is skipped when it has the embedding's shape."""
    embed = next((n for n in expected if n.endswith("embed_tokens.weight")), None)
    if (
        TIED_HEAD in got
        and TIED_HEAD not in expected
        and embed is not None
        and got[TIED_HEAD] == expected[embed]
    ):
        return {TIED_HEAD}
    return set()


def named_tensors(weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The payload's ``(name, tensor)`` pairs, refusing anything that is not a named torch tensor."""
    import torch

    pairs = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
    seen: set[str] = set()
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise WeightUpdateError(
                f"weights item {i} is {type(pair).__name__}, expected a (name, torch.Tensor) pair"
            )
        name, tensor = pair
        if not isinstance(name, str):
            raise WeightUpdateError(
                f"weights item {i} has name {name!r}; tensor names are checkpoint names (str)"
            )
        if not isinstance(tensor, torch.Tensor):
            raise WeightUpdateError(f"tensor {name} is a {type(tensor).__name__}, expected a torch.Tensor")
        if name in seen:
            raise WeightUpdateError(f"tensor {name} appears twice in the weights; send each tensor once")
        seen.add(name)
    return [(name, tensor) for name, tensor in pairs]


def buckets(pairs: list[tuple[str, Any]], bucket_bytes: int) -> Iterator[list[tuple[str, Any]]]:
    """Consecutive groups of about ``bucket_bytes``; a tensor larger than that is a bucket of its own."""
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, tensor in pairs:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def pack(bucket: list[tuple[str, Any]]) -> bytes:
    """One bucket as a safetensors blob: plain bytes through vLLM's RPC, read back without pickle.

    Each tensor is cloned because safetensors refuses tensors that share storage (views of one
    trainer buffer)."""
    from safetensors.torch import save

    return save({name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in bucket})


def prepare_update(
    weights: Any, expected: Shapes, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> WeightUpdate:
    """Check ``weights`` against the engine's checkpoint shapes and turn it into worker calls.

    Nothing reaches the engine before the whole payload has passed the checks.
    """
    if not isinstance(bucket_bytes, int) or bucket_bytes < 1:
        raise WeightUpdateError(f"bucket_bytes must be a positive integer, got {bucket_bytes!r}")
    if isinstance(weights, str | os.PathLike):
        directory = Path(weights)
        if not directory.is_dir():
            raise WeightUpdateError(
                f"weights directory {directory} does not exist; pass a checkpoint directory or tensors"
            )
        got = checkpoint_shapes(directory)
        skip = drop_tied_head(expected, got)
        check_names_and_shapes(expected, {n: s for n, s in got.items() if n not in skip})
        return WeightUpdate(
            loads=[(LOAD_CHECKPOINT, (str(directory.resolve()), sorted(skip)))], tensors=len(got) - len(skip)
        )
    if isinstance(weights, bytes | bytearray) or not isinstance(weights, Mapping | Iterable):
        raise WeightUpdateError(
            f"weights is a {type(weights).__name__}; pass a checkpoint directory, a mapping of name -> torch.Tensor "
            "or an iterable of (name, torch.Tensor) pairs"
        )
    pairs = named_tensors(weights)
    got = {name: tuple(tensor.shape) for name, tensor in pairs}
    skip = drop_tied_head(expected, got)
    pairs = [(n, t) for n, t in pairs if n not in skip]
    check_names_and_shapes(expected, {n: s for n, s in got.items() if n not in skip})
    return WeightUpdate(
        loads=[(LOAD_BUCKET, (pack(b),)) for b in buckets(pairs, bucket_bytes)], tensors=len(pairs)
    )


def transfer_update(update_info: dict[str, Any]) -> WeightUpdate:
    """The engine's side of an update a trainer broadcasts over the transfer group: one receive call,
    in which each worker loads the tensors as they arrive."""
    return WeightUpdate(loads=[(RECEIVE_TRANSFER, (dict(update_info),))], tensors=len(update_info["names"]))


def next_version(current: int, version: int | None) -> int:
    """The policy version after an update: ``current + 1``, or ``version`` when it is greater."""
    if version is None:
        return current + 1
    if isinstance(version, bool) or not isinstance(version, int):
        raise WeightUpdateError(f"version must be an integer, got {version!r}")
    if version <= current:
        raise WeightUpdateError(
            f"version {version} is not greater than the engine's current policy version {current}; "
            "versions only grow (leave version unset for current + 1)"
        )
    return version
