"""Small deterministic inputs for the preprocess job tests: every row has a unique ``id``.

Rows mix EN/ZH/JA/KO text, list content, think blocks, tool calls (list and JSON string), trivial
exchanges HardFilter drops, and dedup groups: exact copies, prefix-equal rows of different lengths
and equal-length ties (so which row wins is visible), all with distinct ids.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path

TOPICS = [
    "How do I merge two sorted linked lists without extra memory?",
    "请解释一下快速排序算法的时间复杂度以及最坏情况。",
    "東京から大阪まで新幹線で行く一番安い方法を教えてください。",
    "서울에서 부산까지 가장 빠르게 가는 방법을 알려주세요.",
    "Why does my Python generator stop after the first iteration?",
    "Write a SQL query that finds the second highest salary per department.",
]


def _tool_call(i: int, as_string: bool):
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
    ]
    return json.dumps(calls) if as_string else calls


def chat_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    for i in range(n):
        kind = rng.random()
        topic = rng.choice(TOPICS) + f" (case {rng.randrange(n // 3 + 1)})"
        answer = f"Here is a careful answer about {topic[:30]}: " + "details follow. " * rng.randrange(6, 12)
        if kind < 0.08:
            messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
        elif kind < 0.2:
            messages = [
                {"role": "system", "content": "You can call tools."},
                {"role": "user", "content": topic},
                {"role": "assistant", "content": "", "tool_calls": _tool_call(i, kind < 0.14)},
                {"role": "tool", "content": "result text", "tool_call_id": f"call_{i}"},
                {"role": "assistant", "content": answer},
            ]
        elif kind < 0.3:
            messages = [
                {"role": "user", "content": [{"type": "text", "text": topic}]},
                {
                    "role": "assistant",
                    "content": f"<think>{'Let me reason step by step. ' * 10}</think>{answer}",
                },
            ]
        else:
            messages = [{"role": "user", "content": topic}, {"role": "assistant", "content": answer}]
            for _ in range(rng.randrange(0, 3)):
                messages += [
                    {"role": "user", "content": f"And what about case {rng.randrange(5)}?"},
                    {"role": "assistant", "content": "Good question. " * rng.randrange(8, 14)},
                ]
        rows.append({"id": i, "source": "test", "messages": messages})
        # duplicates: an exact copy, or the same opening with a longer/shorter tail, or a tie
        roll = rng.random()
        if roll < 0.15:
            rows.append({"id": None, "source": "test", "messages": json.loads(json.dumps(messages))})
        elif roll < 0.25:
            longer = messages + [
                {"role": "user", "content": "Thanks, one more thing?"},
                {"role": "assistant", "content": "Sure."},
            ]
            rows.append({"id": None, "source": "test", "messages": longer})
        elif roll < 0.3 and len(messages) >= 2:
            tie = messages[:-1] + [
                {**messages[-1], "content": str(messages[-1].get("content"))[:200] + " (v2)"}
            ]
            rows.append({"id": None, "source": "test", "messages": tie})
    rng.shuffle(rows)
    for i, row in enumerate(rows):
        row["id"] = i
    return rows


def cut_emoji_row(row_id: int) -> dict:
    """Valid JSON whose text holds half of a surrogate pair (a cut emoji): Python reads it as a lone
    surrogate, which UTF-8 cannot encode. It is a row like any other and must survive the job."""
    return {
        "id": row_id,
        "source": "test",
        "messages": [
            {"role": "user", "content": "My message was cut inside an emoji \ud83d, can you still read it?"},
            {
                "role": "assistant",
                "content": "Yes. The broken character is kept exactly as it is, and the rest of your "
                "message reads fine, so nothing you wrote is lost.",
            },
        ],
    }


# The last one is not UTF-8 (written through surrogateescape).
BAD_LINES = ["{not json", "[1, 2, 3]", '"just a string"', '{"truncated": [', "\udcff\udcfe garbage"]


def write_jsonl_files(
    directory: Path, rows: list[dict], n_files: int, gz_last: bool = True, bad_every: int = 97
) -> list[Path]:
    """Split rows over ``n_files`` files (the last gzipped), with bad and blank lines sprinkled in and
    one cut-emoji row per file."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    per_file = (len(rows) + n_files - 1) // n_files
    bad = 0
    for f in range(n_files):
        lines = []
        for j, row in enumerate(rows[f * per_file : (f + 1) * per_file]):
            lines.append(json.dumps(row, ensure_ascii=(j % 2 == 0)))
            if j % bad_every == 5:
                lines.append(BAD_LINES[bad % len(BAD_LINES)])
                bad += 1
            if j % 50 == 7:
                lines.append("   ")
            if j == 3:
                lines.append(json.dumps(cut_emoji_row(900_000 + f)))
        text = "\r\n".join(lines) if f == 0 else "\n".join(lines) + "\n"
        gz = gz_last and f == n_files - 1 and n_files > 1
        path = directory / f"part-{f:02d}.jsonl{'.gz' if gz else ''}"
        data = text.encode("utf-8", "surrogateescape")
        path.write_bytes(gzip.compress(data) if gz else data)
        paths.append(path)
    return paths


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def read_outputs(out: Path) -> dict:
    """Kept rows (JSONL or Parquet parts), ledger entries and stats of a finished run."""
    import pyarrow.parquet as pq

    kept_lines = [line for p in sorted((out / "kept").glob("*.jsonl")) for line in p.read_text().splitlines()]
    for part in sorted((out / "kept").glob("*.parquet")):
        kept_lines += pq.read_table(part).column("row").to_pylist()
    ledger = [
        json.loads(line)
        for p in sorted((out / "dropped").glob("*.jsonl"))
        for line in p.read_text().splitlines()
    ]
    return {
        "kept_lines": kept_lines,
        "kept": Counter(canonical(json.loads(line)) for line in kept_lines),
        "ledger": ledger,
        "dropped": Counter((e["step"], e["reason"], canonical(e["row"])) for e in ledger),
        "stats": json.loads((out / "stats.json").read_text()),
    }


def reference_outputs(run) -> dict:
    return {
        "kept": Counter(canonical(r) for r in run.kept),
        "dropped": Counter((step, reason, canonical(row)) for step, reason, row in run.dropped),
    }
