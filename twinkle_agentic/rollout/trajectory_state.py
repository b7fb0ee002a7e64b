"""One trajectory's multi-turn state machine (SPEC 17.2 steps 1-8), independent of how it is driven.

    ids = state.start()                          # prompt ids, or None: ended before sampling
    while ids is not None:
        seq = <sample ids with max_tokens=state.max_new_tokens(...)>
        calls = state.on_generation(seq)         # tool calls to run, or None: ended
        if calls is None:
            break
        ids = state.on_tools(run_tool_calls(manager, calls))   # next prompt ids, or None: ended
    trajectory = state.result()

``MultiTurnRollout`` drives many states in lockstep with one batched ``sample`` per turn; an
asynchronous driver can drive each state on its own. Either way every token decision (what is
trainable, the bridge, the budget, the stop reason) is made here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from twinkle_agentic.data_format import SampledSequence, SamplingParams, ToolCall
from twinkle_agentic.template.renderer_backend import BridgeError
from twinkle_agentic.template.template import TemplateLengthError

from .base import (
    DEFAULT_MAX_TURNS,
    ERROR,
    LENGTH,
    MAX_TURNS,
    STOP,
    finish,
    format_error,
    tool_message,
    with_call_ids,
)
from .bookkeeping import TokenLedger, Turn, check_aligned, chosen_logprobs

logger = logging.getLogger(__name__)


__all__ = ["BridgeError", "TrajectoryState", "run_tool_calls", "with_template_stops"]


def with_template_stops(params: SamplingParams, template: Any) -> SamplingParams:
    """``params`` with the template's stop tokens added (a renderer's: the family's turn ends), so
    an engine stops where the format ends a turn whatever its own EOS; unchanged when the template
    has none or ``stop`` holds strings (vLLM takes both, but ``stop`` here holds one kind)."""
    stops = getattr(template, "stop_token_ids", None)
    extra = [int(t) for t in (stops() if callable(stops) else [])]
    if not extra or params.stop_strings:
        return params
    merged = list(params.stop_token_ids)
    merged += [t for t in extra if t not in merged]
    return params if merged == params.stop_token_ids else params.replace(stop=merged)


def run_tool_calls(manager: Any, calls: Sequence[ToolCall]) -> list[str]:
    """Run a turn's calls in order through a ``ToolManager``; its exceptions propagate to the caller."""
    return [str(manager(call)) for call in calls]


class TrajectoryState:
    """Messages, tokens and stop reason of one trajectory being rolled out."""

    def __init__(
        self,
        trajectory: Mapping[str, Any],
        template: Any,
        *,
        tools: list[dict[str, Any]] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_trajectory_tokens: int | None = None,
        verify_tokens: bool = True,
    ):
        self.trajectory = dict(trajectory)
        self.messages: list[dict[str, Any]] = [dict(m) for m in trajectory.get("messages") or []]
        self.tools = tools or None
        self.template = template
        self.max_turns = max_turns
        self.max_trajectory_tokens = max_trajectory_tokens
        self.max_length = getattr(template, "max_length", None)
        self.verify_tokens = verify_tokens
        self.turns = 0
        self.ledger: TokenLedger | None = None
        self.stop_reason: str | None = None
        self.error: str | None = None
        self._pending: Turn | None = None  # the generated part of the current turn, before its bridge
        self._pending_calls: list[ToolCall] = []
        self._missing_logprobs = False

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    # -- budget ----------------------------------------------------------------------------------------

    def _room(self) -> int | None:
        """Tokens that may still be generated before a budget is met (None: no budget)."""
        used = len(self.ledger) if self.ledger is not None else 0
        limits = [x for x in (self.max_trajectory_tokens, self.max_length) if x is not None]
        return min(limits) - used if limits else None

    def max_new_tokens(self, requested: int | None) -> int | None:
        """``requested`` capped at the room left in the trajectory budget and the template ``max_length``."""
        room = self._room()
        if room is None:
            return requested
        return room if requested is None else min(requested, room)

    # -- transitions -----------------------------------------------------------------------------------

    def start(self) -> list[int] | None:
        """Step 1: encode with a generation prompt; every prompt label is -100. None when already ended."""
        try:
            encoded = self.template.encode({"messages": self.messages, "tools": self.tools}, add_generation_prompt=True)
        except Exception as exc:
            self.ledger = TokenLedger([])
            reason = LENGTH if isinstance(exc, TemplateLengthError) else ERROR
            self._end(reason, None if reason == LENGTH else format_error(exc, "Template"))
            return None
        self.ledger = TokenLedger(encoded["input_ids"])
        room = self._room()
        if room is not None and room <= 0:
            self._end(LENGTH)
            return None
        return list(self.ledger.prompt_ids)

    def on_generation(self, seq: SampledSequence) -> list[ToolCall] | None:
        """Steps 2-4: record the turn, build the assistant message, decide whether to stop."""
        self._expect_phase(generating=True)
        tokens = [int(t) for t in seq.tokens]
        logprobs = chosen_logprobs(tokens, seq.logprobs)
        pending = Turn.of(tokens, logprobs, policy_versions=seq.policy_versions)  # refuses runs that miscount
        self.turns += 1
        self._missing_logprobs |= logprobs is None
        parsed = self.template.parse_turn(tokens, self.ledger.input_ids(), self.tools)
        message = dict(parsed.message)
        calls = with_call_ids(parsed.tool_calls, self.turns)
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)
        self._pending = pending
        if seq.stop_reason == "length":
            return self._close_turn(LENGTH)
        if seq.stop_reason in ("abort", "error"):
            return self._close_turn(ERROR, f"SamplerError: generation finished with {seq.stop_reason!r}")
        if not calls:
            return self._close_turn(STOP)
        n = len(self.ledger) + len(tokens)
        if (self.max_trajectory_tokens is not None and n >= self.max_trajectory_tokens) or (
            self.max_length is not None and n > self.max_length
        ):
            return self._close_turn(LENGTH)
        if self.turns >= self.max_turns:
            return self._close_turn(MAX_TURNS)
        self._pending_calls = calls
        return calls

    def on_tools(self, results: Sequence[str] | BaseException) -> list[int] | None:
        """Steps 5-6: append tool messages and the bridge; next prompt ids, or None when ended."""
        self._expect_phase(generating=False)
        calls, pending = self._pending_calls, self._pending
        if isinstance(results, BaseException):
            return self._close_turn(ERROR, format_error(results, "ToolExecution"))
        if len(results) != len(calls):
            return self._close_turn(ERROR, f"ToolExecution: {len(results)} results for {len(calls)} tool calls")
        before = len(self.messages)
        for index, (call, content) in enumerate(zip(calls, results, strict=True)):
            self.messages.append(tool_message(call, str(content), self.turns, index))
        try:  # the sampled stream is extended, never re-rendered
            bridge = self.template.bridge_ids(
                self.ledger.input_ids(), pending.generated_ids, self.messages[:before], self.messages, self.tools
            )
        except Exception as exc:
            return self._close_turn(ERROR, format_error(exc))
        self.ledger.append(replace(pending, bridge_ids=tuple(bridge)))
        self._pending, self._pending_calls = None, []
        room = self._room()
        if room is not None and room <= 0:  # the bridge reached a budget: no token could follow
            self._end(LENGTH)
            return None
        return self.ledger.input_ids()

    def fail(self, exc: BaseException | str) -> None:
        """End with ``error`` (e.g. the sampler failed for this trajectory only)."""
        text = exc if isinstance(exc, str) else format_error(exc)
        if self._pending is not None:
            self._close_turn(ERROR, text)
        elif not self.done:
            if self.ledger is None:
                self.ledger = TokenLedger([])
            self._end(ERROR, text)

    # -- internals -------------------------------------------------------------------------------------

    def _expect_phase(self, generating: bool) -> None:
        if self.done or self.ledger is None:
            raise RuntimeError("trajectory is not running: call start() first, and nothing after it ended")
        if generating and self._pending is not None:
            raise RuntimeError("on_generation called twice without on_tools in between")
        if not generating and self._pending is None:
            raise RuntimeError("on_tools called without a pending generation")

    def _close_turn(self, reason: str, error: str | None = None) -> None:
        """End the trajectory on the pending generation (no bridge); returns None for the callers' return."""
        self.ledger.append(self._pending)
        self._pending, self._pending_calls = None, []
        self._end(reason, error)
        return None

    def _end(self, reason: str, error: str | None = None) -> None:
        self.stop_reason, self.error = reason, error

    def result(self) -> dict[str, Any]:
        """Step 8 and the output: the input trajectory plus tokens, policy versions, messages and outcome
        (aligned, checked); every ending, ``error`` and ``length`` included, has the same keys."""
        if not self.done:
            raise RuntimeError("result() before the trajectory ended")
        out = dict(self.trajectory)
        if self.tools and not out.get("tools"):
            out["tools"] = self.tools
        out.update(self.ledger.feature())
        out["messages"] = self.messages
        if self._missing_logprobs:
            out["logprobs"] = None
            logger.warning("a turn of this trajectory had no logprobs; its logprobs are None")
        finish(out, self.stop_reason, self.turns, self.error)
        check_aligned(out, generated_tokens=self.ledger.generated_count())
        if self.verify_tokens:
            out["token_drift"] = self.template.token_drift(out["input_ids"], self.messages, self.tools)
        return out
