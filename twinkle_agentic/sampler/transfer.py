"""Weights sent over a process group shared by the trainer and the engines, through vLLM's pluggable
transfer engines (``vllm.distributed.weight_transfer``).

vLLM ships the GPU backends (``nccl``; ``ipc`` and sharded Ray Direct Transport need co-located or
Ray-managed trainers). This module adds ``gloo``, the same protocol over torch's gloo collectives, so
CPU engines (tests, laptops) take exactly the path a GPU node takes with ``nccl``: the trainer-side
engine (``WeightTransferTrainerFactory``) rendezvous with every engine worker, then each update is
one broadcast of the trainer's tensors, in buckets, that the workers load as they arrive.

``register_gloo`` puts the backend in both of vLLM's factories; the engine workers run it when they
import the sampler's worker extension, before vLLM builds their transfer engine.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

GLOO = "gloo"
DEFAULT_BUCKET_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_S = 1800.0  # a receiver may first wait for its running requests (FarmOptions.finish_timeout_s)
ALIGN = 64  # byte offset of every tensor in a bucket, so each is viewed in place as its dtype


@dataclass(kw_only=True)
class GlooInitInfo(WeightTransferInitInfo):
    """What an engine worker needs to join the trainer's group: the trainer's store address, this
    engine's first rank (the trainer is rank 0) and the group's size, and the bucket size both sides
    cut the stream by."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    """The tensors of one update, in the order the trainer sends them."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.dtype_names) == len(self.shapes):
            raise ValueError(
                f"names, dtype_names and shapes differ in length ({len(self.names)}, {len(self.dtype_names)}, "
                f"{len(self.shapes)}); send one entry per tensor"
            )


@dataclass
class GlooTrainerInitInfo(TrainerInitInfo):
    """The trainer's side of the group (``rank`` 0 sends); ``world_size`` counts the trainer and every
    engine worker."""

    backend: ClassVar[str] = GLOO

    master_address: str
    master_port: int
    world_size: int
    bucket_bytes: int = DEFAULT_BUCKET_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True)
class Slot:
    """Where one tensor sits in its bucket."""

    index: int
    offset: int
    nbytes: int


def bucket_plan(dtypes: list[torch.dtype], shapes: list[list[int]], bucket_bytes: int) -> list[list[Slot]]:
    """Consecutive tensors cut into buckets of about ``bucket_bytes`` (a larger tensor is a bucket of
    its own); sender and receivers compute the same plan from the update's metadata."""
    plan: list[list[Slot]] = []
    bucket: list[Slot] = []
    size = 0
    for i, (dtype, shape) in enumerate(zip(dtypes, shapes, strict=True)):
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        offset = -(-size // ALIGN) * ALIGN
        if bucket and offset + nbytes > bucket_bytes:
            plan.append(bucket)
            bucket, offset = [], 0
        bucket.append(Slot(i, offset, nbytes))
        size = offset + nbytes
    if bucket:
        plan.append(bucket)
    return plan


def bucket_size(bucket: list[Slot]) -> int:
    return bucket[-1].offset + bucket[-1].nbytes


class GlooGroup:
    """A gloo group outside ``torch.distributed``'s default one (vLLM's own group lives there); rank 0
    hosts the rendezvous store. ``host`` is the address this process's peers reach it at."""

    def __init__(self, address: str, port: int, rank: int, world_size: int, timeout_s: float, host: str):
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        self.store = dist.TCPStore(address, port, world_size, rank == 0, timeout=timeout)
        options = dist.ProcessGroupGloo._Options()
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        options._timeout = timeout
        self.group = dist.ProcessGroupGloo(self.store, rank, world_size, options)

    def broadcast(self, buffer: torch.Tensor) -> None:
        """Rank 0's ``buffer`` into everyone's."""
        import torch.distributed as dist

        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([buffer], options).wait()


class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
    """The engine worker's side: joins the trainer's gloo group, receives each bucket and hands its
    tensors to the model's ``load_weights`` (checkpoint names, stacked and sharded parameters)."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group: Any = None
        self.bucket_bytes = DEFAULT_BUCKET_BYTES

    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        from vllm.utils.network_utils import get_ip

        parallel = self.parallel_config
        rank = init_info.rank_offset + parallel.data_parallel_index * parallel.world_size + parallel.rank
        self.bucket_bytes = init_info.bucket_bytes
        self.group = GlooGroup(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s, get_ip()
        )

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.receive_weights(self.parse_update_info(update_info))  # CPU tensors: nothing to synchronize

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("the gloo weight transfer is not initialised; call init_weight_transfer_engine first")
        dtypes = [getattr(torch, name) for name in update_info.dtype_names]
        for bucket in bucket_plan(dtypes, update_info.shapes, self.bucket_bytes):
            buffer = torch.empty(bucket_size(bucket), dtype=torch.uint8)
            self.group.broadcast(buffer)
            self.model.load_weights(
                (
                    update_info.names[s.index],
                    buffer[s.offset : s.offset + s.nbytes].view(dtypes[s.index]).view(update_info.shapes[s.index]),
                )
                for s in bucket
            )

    def shutdown(self) -> None:
        self.group = None


class GlooTrainerWeightTransferEngine(TrainerWeightTransferEngine[GlooTrainerInitInfo]):
    """The trainer's side: hosts the group's store as rank 0, and each ``send_weights`` broadcasts the
    source's tensors while the client has the engines receive them."""

    init_info_cls = GlooTrainerInitInfo

    def __init__(self, *, init_info: GlooTrainerInitInfo, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.init_info = init_info
        self.group: Any = None

    @classmethod
    def trainer_init(
        cls, init_info: GlooTrainerInitInfo, *, client: VLLMWeightSyncClient, source: WeightSource | None = None
    ) -> GlooTrainerWeightTransferEngine:
        if source is None:
            raise ValueError("the gloo trainer engine sends a WeightSource each round; pass source=")
        engine = cls(init_info=init_info, client=client, source=source, is_sender=init_info.is_sender)
        if not engine.is_sender:
            return engine
        worker_info = GlooInitInfo(
            master_address=init_info.master_address,
            master_port=init_info.master_port,
            rank_offset=1,
            world_size=init_info.world_size,
            bucket_bytes=init_info.bucket_bytes,
            timeout_s=init_info.timeout_s,
        )
        with ThreadPoolExecutor(max_workers=1) as pool:  # the engines block in the rendezvous meanwhile
            joined = pool.submit(client.init_weight_transfer_engine, asdict(worker_info))
            engine.group = GlooGroup(
                init_info.master_address,
                init_info.master_port,
                0,
                init_info.world_size,
                init_info.timeout_s,
                init_info.master_address,
            )
            joined.result()
        return engine

    def send_weights(self) -> None:
        assert self.source is not None
        meta = self.source.metadata()
        if not self.is_sender:
            for _ in self.source:  # stay in the trainer-side collectives that materialise each tensor
                pass
            return
        info = GlooUpdateInfo(
            names=[m.name for m in meta],
            dtype_names=[str(m.dtype).removeprefix("torch.") for m in meta],
            shapes=[list(m.shape) for m in meta],
        )
        self.client.start_weight_update()
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            received = pool.submit(self.client.update_weights, asdict(info))
            self._broadcast(info, [m.dtype for m in meta])
            received.result()
        finally:
            pool.shutdown(wait=False)  # a failed broadcast leaves the receivers' call to fail on its own
        self.client.finish_weight_update()

    def _broadcast(self, info: GlooUpdateInfo, dtypes: list[torch.dtype]) -> None:
        tensors = self._checked(info, dtypes)
        for bucket in bucket_plan(dtypes, info.shapes, self.init_info.bucket_bytes):
            buffer = torch.zeros(bucket_size(bucket), dtype=torch.uint8)
            for s in bucket:
                tensor = next(tensors)
                buffer[s.offset : s.offset + s.nbytes].view(dtypes[s.index]).view(tensor.shape).copy_(tensor)
            self.group.broadcast(buffer)
        next(tensors, None)  # a source that yields more than its metadata() declared raises here

    def _checked(self, info: GlooUpdateInfo, dtypes: list[torch.dtype]) -> Iterator[torch.Tensor]:
        """The source's tensors on CPU, each checked against the metadata the receivers cut by."""
        assert self.source is not None
        count = 0
        for count, (name, tensor) in enumerate(self.source, start=1):
            i = count - 1
            if i >= len(info.names) or (name, tensor.dtype, list(tensor.shape)) != (
                info.names[i],
                dtypes[i],
                info.shapes[i],
            ):
                expected = f"{info.names[i]} {dtypes[i]} {info.shapes[i]}" if i < len(info.names) else "no more tensors"
                raise ValueError(
                    f"the weight source yielded {name} {tensor.dtype} {list(tensor.shape)} at position {i}, where its "
                    f"metadata() declared {expected}; both must list the same tensors in the same order"
                )
            yield tensor.detach().to("cpu")
        if count != len(info.names):
            raise ValueError(f"the weight source yielded {count} tensors; its metadata() declared {len(info.names)}")

    def shutdown(self) -> None:
        self.group = None


def register_gloo() -> None:
    """Make ``weight_transfer_config={"backend": "gloo"}`` and ``GlooTrainerInitInfo`` known to vLLM in
    this process (idempotent)."""
    if GLOO not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(GLOO, GlooWeightTransferEngine)
    if GLOO not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(GLOO, GlooTrainerWeightTransferEngine)


class SamplerSyncClient:
    """vLLM's ``VLLMWeightSyncClient`` over one sampler in this process, for a trainer that drives a
    single engine with a trainer-side transfer engine; ``RolloutFarm.open_weight_transfer`` is the
    same for a farm. Each ``update_weights`` loads as the sampler's next policy version
    (``version``, set it before a send to choose one) with ``on_update``."""

    def __init__(self, sampler: Any, on_update: str = "finish"):
        self.sampler = sampler
        self.on_update = on_update
        self.version: int | None = None

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.sampler.init_weight_transfer(init_info)

    def start_weight_update(self) -> None:
        """Nothing: the receive call starts, drains and finishes the engine's update."""

    def update_weights(self, update_info: dict[str, Any]) -> None:
        from .weights import transfer_update

        self.version = self.sampler.apply_update(
            transfer_update(update_info), version=self.version, on_update=self.on_update
        )

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Nothing: the update finished inside ``update_weights``."""
