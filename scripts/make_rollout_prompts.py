#!/usr/bin/env python
"""Write the demo rollout prompts: held-out phrasings for the demo tools and the guessing game.

    python scripts/make_rollout_prompts.py [--per-kind 10] [--seed 2024] [--out data/sample/rollout_prompts.jsonl]

The tiny model was trained on ``scripts/dialogues.py`` train phrasings; these prompts use
the held-out phrasings (same cities and numbers, new wordings and combinations), so the demo shows
how it does on requests it has not seen. Each row: ``id``, ``kind``, the user ``messages``,
``ground_truth`` (facts a good final answer states) and, for the game, ``envs: [guess_number]``,
``toolsets: []`` and the secret number in ``user_data`` (the env server's game reads it at reset).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts import dialogues  # noqa: E402
from twinkle_agentic.data_format import pack_value  # noqa: E402

GAME_ENV = "guess_number"


def rows(per_kind: int, seed: int) -> list[dict]:
    out, counts = [], {}
    for episode in dialogues.heldout_prompts(n_per_kind=per_kind, seed=seed):
        counts[episode.kind] = counts.get(episode.kind, 0) + 1
        row = {
            "id": f"{episode.kind}-{counts[episode.kind]:03d}",
            "kind": episode.kind,
            "messages": [episode.messages[0]],
            "ground_truth": episode.facts,
        }
        if episode.kind == "game":
            row.update(envs=[GAME_ENV], toolsets=[], user_data=[["target", pack_value(int(episode.facts[0]))]])
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-kind", type=int, default=10)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", default=str(ROOT / "data" / "sample" / "rollout_prompts.jsonl"))
    args = parser.parse_args(argv)
    data = rows(args.per_kind, args.seed)
    Path(args.out).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
    print(f"wrote {len(data)} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
