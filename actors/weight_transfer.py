"""``WeightTransfer``: the trainer and every engine of a farm in one process group, so each update is a
broadcast of the trainer's tensors through vLLM's transfer engines instead of a payload in Ray's
object store.

The backend is the engines' ``weight_transfer``: ``nccl`` on GPU engines (vLLM's own engine, GPU to
GPU), ``gloo`` on CPU engines (``twinkle_agentic.sampler.transfer``). Both run vLLM's trainer-side
engine (``WeightTransferTrainerFactory``) against ``FarmSyncClient``, which has every worker receive.
Membership is fixed when the group forms: when the farm's live workers change (a replacement, a
late start), the next update forms a new group first.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from .worker import CONTROL_GROUP

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 1800.0


class WeightTransferError(RuntimeError):
    """A transfer-group update failed; the workers of the group are being replaced."""


class FarmSyncClient:
    """vLLM's ``VLLMWeightSyncClient`` over a farm's workers. ``update_weights`` only submits each
    worker's receive call; the driver collects them after the broadcast (``WeightTransfer.send``), so
    the farm's state is only ever touched from the driver's thread."""

    def __init__(self, transfer: WeightTransfer):
        self.transfer = transfer
        self.calls: dict[Any, Any] = {}

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        import ray

        transfer = self.transfer
        shards = transfer.farm.engine.world_size
        refs = [
            slot.handle.init_weight_transfer.options(concurrency_group=CONTROL_GROUP).remote(
                {**init_info, "rank_offset": init_info["rank_offset"] + i * shards}
            )
            for i, slot in enumerate(transfer.members)
        ]
        ray.get(refs, timeout=transfer.timeout_s)

    def start_weight_update(self) -> None:
        """Nothing: each worker's receive call starts, drains and finishes its own engine's update."""

    def update_weights(self, update_info: dict[str, Any]) -> None:
        import ray

        from twinkle_agentic.sampler.weights import transfer_update

        transfer = self.transfer
        farm = transfer.farm
        self.calls = farm._submit_update(
            ray.put(transfer_update(update_info)), transfer.version, transfer.on_update, transfer.members
        )

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        """Nothing: the driver collects the receive calls (``WeightTransfer.send``)."""


class WeightTransfer:
    """The trainer side of a farm's transfer group (``RolloutFarm.open_weight_transfer``).

    ``source`` is the trainer's ``torch.nn.Module`` (its ``named_parameters``, under the checkpoint's
    names) or any vLLM ``WeightSource``. ``master_address`` is where the engines reach this process
    (default: this node's Ray address), ``master_port`` a free port there (default: picked).
    ``bucket_bytes`` sizes the broadcast buckets; ``timeout_s`` bounds the rendezvous and each
    collective (an engine may first wait up to ``finish_timeout_s`` for its running requests).
    """

    def __init__(
        self,
        farm: Any,
        source: Any,
        *,
        master_address: str | None = None,
        master_port: int | None = None,
        bucket_bytes: int = 64 * 1024 * 1024,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        from twinkle_agentic.sampler.weights import WeightUpdateError

        backend = farm.engine.weight_transfer
        if not backend:
            raise WeightUpdateError(
                "the farm's engines were started without weight_transfer; set EngineConfig(weight_transfer='nccl') "
                "on GPU engines or 'gloo' on CPU engines to push weights over a process group"
            )
        if not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise WeightUpdateError(f"bucket_bytes must be a positive integer, got {bucket_bytes!r}")
        self.farm = farm
        self.backend = backend
        self.source = _weight_source(source)
        self.master_address = master_address
        self.master_port = master_port
        self.bucket_bytes = bucket_bytes
        self.timeout_s = float(timeout_s)
        self.client = FarmSyncClient(self)
        self.members: list[Any] = []  # the worker slots in the group, in rank order
        self._handles: list[Any] = []  # their actor handles when the group formed
        self.engine: Any = None
        self.version = farm.policy_version
        self.on_update = farm.options.on_update

    def open(self) -> None:
        """Form the group with every live worker (waiting for those still starting)."""
        from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

        farm = self.farm
        if all(slot.handle is None for slot in farm.slots):
            farm.start()
        farm._settle_starting(farm.policy_version + 1)
        members = [s for s in farm.slots if s.state == "ready"]
        if not members:
            raise WeightTransferError("no live worker to form a weight-transfer group with")
        world_size = 1 + len(members) * farm.engine.world_size
        self.members, self._handles = members, [s.handle for s in members]
        self.engine = WeightTransferTrainerFactory.trainer_init(
            self._init_info(world_size), client=self.client, source=self.source
        )
        logger.info("weight-transfer group (%s) formed with workers %s", self.backend, [s.index for s in members])

    def _init_info(self, world_size: int) -> Any:
        from twinkle_agentic.net import free_port

        address = self.master_address or _node_address()
        port = self.master_port or free_port(address)
        if self.backend == "gloo":
            from twinkle_agentic.sampler.transfer import GlooTrainerInitInfo, register_gloo

            register_gloo()
            return GlooTrainerInitInfo(
                master_address=address,
                master_port=port,
                world_size=world_size,
                bucket_bytes=self.bucket_bytes,
                timeout_s=self.timeout_s,
                rank=0,
            )
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        return NCCLTrainerInitInfo(
            master_address=address,
            master_port=port,
            world_size=world_size,
            packed_buffer_size_bytes=self.bucket_bytes,
            rank=0,
        )

    def close(self) -> None:
        """Leave the group on both sides (the workers that are still alive)."""
        import ray

        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
        live = [s for s, h in zip(self.members, self._handles, strict=True) if s.handle is h and s.state == "ready"]
        refs = [s.handle.close_weight_transfer.options(concurrency_group=CONTROL_GROUP).remote() for s in live]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=60)
        self.members, self._handles = [], []

    def send(self, version: int, on_update: str) -> int:
        """Broadcast the source's tensors as ``version`` (``RolloutFarm.update_weights`` calls this)."""
        from twinkle_agentic.sampler.weights import Stopwatch, check_names_and_shapes, drop_tied_head

        from .driver import FarmUpdate

        farm = self.farm
        watch = Stopwatch()
        meta = self.source.metadata()
        got = {m.name: tuple(m.shape) for m in meta}
        expected = farm._checkpoint_shapes()
        skip = drop_tied_head(expected, got)
        if skip:
            raise WeightTransferError(
                f"the weight source holds {', '.join(sorted(skip))}, the tied embedding the checkpoint does not "
                "have; send the module itself (named_parameters lists a tied tensor once)"
            )
        check_names_and_shapes(expected, got)
        report = FarmUpdate(
            version, len(meta), sum(_nbytes(m) for m in meta), prepare_s=watch.lap(), put_s=0.0
        )
        farm._settle_starting(version)
        if self._stale():
            self.close()
            self.open()
        self.version, self.on_update = version, on_update
        self.client.calls = {}
        try:
            self.engine.send_weights()
        except Exception as exc:
            # A broken collective leaves every receiver stuck in it: replace the whole group.
            for slot in self.members:
                farm._kill(slot)
            farm._collect_update(self.client.calls, report)
            self.members, self._handles, self.engine = [], [], None
            raise WeightTransferError(
                f"the {self.backend} broadcast of policy version {version} failed ({exc}); its workers are being "
                "replaced and the next update forms a new group"
            ) from exc
        farm.policy_version = version
        farm._collect_update(self.client.calls, report)
        report.wall_s = watch.lap() + report.prepare_s
        return version

    def _stale(self) -> bool:
        """The group no longer matches the farm's live workers (one was replaced, retired or added)."""
        live = [(s.index, s.handle) for s in self.farm.slots if s.state == "ready"]
        return self.engine is None or live != [(s.index, h) for s, h in zip(self.members, self._handles, strict=True)]


def _weight_source(source: Any) -> Any:
    from vllm.distributed.weight_transfer.base import ModuleSource, WeightSource

    if isinstance(source, WeightSource):
        return source
    import torch

    if isinstance(source, torch.nn.Module):
        return ModuleSource(source)
    raise TypeError(f"source is a {type(source).__name__}; pass the trainer's torch.nn.Module or a vLLM WeightSource")


def _nbytes(meta: Any) -> int:
    return math.prod(meta.shape) * meta.dtype.itemsize


def _node_address() -> str:
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"



