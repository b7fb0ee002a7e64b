"""Bundled demo: the tools and environment the project's tiny model was trained to use.

``tools`` (get_weather over a fixed table, a calculator), ``guessing`` (the rules of a
number-guessing game), ``env`` (that game as an ``Env``). The seeded synthetic dialogues the model
trains on are training data, not runtime: ``scripts/dialogues.py``.
"""

from __future__ import annotations

from pathlib import Path

TINY_AGENT_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny_agent"


def tiny_model_path() -> str:
    """Directory of the committed tiny tool-calling model (HF format, loadable by vLLM)."""
    if not (TINY_AGENT_DIR / "config.json").is_file():
        raise FileNotFoundError(
            f"tiny model not found at {TINY_AGENT_DIR}; build it with `python scripts/train_tiny_model.py`"
        )
    return str(TINY_AGENT_DIR)
