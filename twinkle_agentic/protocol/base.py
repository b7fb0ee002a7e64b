"""The ``API`` contract: a trajectory plus sampling parameters in, an assistant message out."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from twinkle_agentic.data_format import Message, SamplingParams, Trajectory


class API(ABC):
    """An LLM endpoint: ``api(trajectory, sampling_params) -> Message`` (a list when
    ``num_samples > 1``). Subclasses implement ``__call__``; ``acall`` is the asynchronous form used
    by ``APIMultiTurnRollout`` and defaults to running ``__call__`` on a worker thread."""

    @abstractmethod
    def __call__(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None = None, **kwargs: Any
    ) -> Message | list[Message]:
        raise NotImplementedError

    async def acall(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None = None, **kwargs: Any
    ) -> Message | list[Message]:
        return await asyncio.to_thread(self, trajectory, sampling_params, **kwargs)

    def bound_acall(self) -> Callable[..., Awaitable[Message | list[Message]]]:
        """``acall`` for many calls on the running event loop; a subclass may resolve per-loop
        state once here instead of on every call."""
        return self.acall
