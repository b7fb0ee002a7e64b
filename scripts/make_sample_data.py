#!/usr/bin/env python
"""Generate the bundled demo dataset ``data/sample/chats.jsonl`` (and bigger corpora for benchmarks).

    python scripts/make_sample_data.py                       # data/sample/chats.jsonl, 400 rows
    python scripts/make_sample_data.py --rows 1000000 --shards 16 --out /tmp/corpus   # benchmark input

Rows are multi-turn chats in EN/ZH/JA/KO, agent rows with tool calls (list and JSON-string form),
think blocks, and a fixed share of each defect the default pipeline removes or rewrites: exact and
extended duplicates, trivial greetings, shallow replies, dead loops, refusals, token soup,
heartbeat turns and Cline-style text tool calls (rewritten by MessageNormalizer), plus lines that
are not JSON or not objects. ``data/sample/manifest.json`` records how many rows of each kind the
generator wrote, so the demo's report can be read against it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "data" / "sample"

# kind -> share of generated rows (the rest are clean chats); duplicates are added on top.
DEFECT_SHARES = {
    "trivial_greeting": 0.05,
    "shallow_reply": 0.04,
    "dead_loop": 0.05,
    "refusal": 0.05,
    "token_soup": 0.04,
    "heartbeat": 0.03,
    "cline_tool_call": 0.03,
}
DUPLICATE_SHARE = 0.10  # each picked row is repeated as an exact copy or extended by two turns
BAD_LINE_SHARE = 0.01

QUESTIONS = {
    "en": [
        "How do I merge two sorted linked lists in place without allocating new nodes?",
        "What is the difference between a process and a thread, and when should I use each?",
        "Can you explain how gradient clipping prevents exploding gradients in RNN training?",
        "Write a Python function that returns the longest palindromic substring of a string.",
        "Why does my Docker container lose its data every time I restart it?",
        "How should I structure retries with exponential backoff for a flaky HTTP API?",
    ],
    "zh": [
        "请详细解释一下快速排序算法的平均和最坏时间复杂度。",
        "如何在 Linux 上查看某个端口被哪个进程占用，并安全地结束它？",
        "帮我写一个 Python 函数，统计一段中文文本里每个词出现的次数。",
        "数据库索引为什么能加快查询速度，它有哪些代价？",
    ],
    "ja": [
        "東京から大阪まで新幹線で行く一番安い方法を詳しく教えてください。",
        "Pythonでリストの重複を順序を保ったまま削除する方法を説明してください。",
        "機械学習の過学習を防ぐための代表的な手法を教えてください。",
    ],
    "ko": [
        "서울에서 부산까지 가장 빠르고 저렴하게 가는 방법을 자세히 알려주세요.",
        "파이썬에서 리스트를 정렬할 때 sort와 sorted의 차이를 설명해 주세요.",
        "데이터베이스 트랜잭션의 격리 수준에 대해 자세히 설명해 주세요.",
    ],
}
# Answers are a few distinct sentences drawn from these pools, so clean rows never repeat n-grams.
SENTENCES = {
    "en": [
        "First, pin down the constraints of the problem and the data you actually have.",
        "The standard technique works here because the input is already sorted.",
        "Check the edge cases: empty input, a single element, and duplicates.",
        "Measure before and after the change so you know the fix really helped.",
        "If memory is tight, process the data in fixed-size chunks instead.",
        "A small unit test for each branch will catch regressions early.",
        "Keep the public interface stable and hide the details behind it.",
        "Logging the intermediate values makes the behaviour much easier to follow.",
        "When in doubt, prefer the simpler design and revisit it with real numbers.",
    ],
    "zh": [
        "首先要明确问题的约束条件和手头已有的数据。",
        "这里可以使用标准方法，因为输入已经是有序的。",
        "要检查边界情况，比如空输入、单个元素和重复元素。",
        "修改前后都要测量，这样才能确认优化真的有效。",
        "如果内存紧张，可以把数据分成固定大小的块来处理。",
        "为每个分支写一个小的单元测试，可以尽早发现回归问题。",
        "保持对外接口稳定，把实现细节隐藏在内部。",
        "记录中间结果能让程序的行为更容易理解。",
    ],
    "ja": [
        "まず問題の制約と手元にあるデータを正確に把握しましょう。",
        "入力がすでに整列されているので、標準的な手法がそのまま使えます。",
        "空の入力や要素が一つだけの場合などの境界条件を確認してください。",
        "変更の前後で計測すれば、改善が本当に効いたかどうか分かります。",
        "メモリが少ない場合は、データを一定の大きさに分けて処理します。",
        "分岐ごとに小さな単体テストを書くと、不具合を早く見つけられます。",
        "公開インターフェースは安定させ、実装の詳細は内部に隠しましょう。",
    ],
    "ko": [
        "먼저 문제의 제약 조건과 실제로 가진 데이터를 정확히 파악하세요.",
        "입력이 이미 정렬되어 있으므로 표준적인 방법을 그대로 쓸 수 있습니다.",
        "빈 입력이나 원소가 하나뿐인 경우 같은 경계 조건을 확인하세요.",
        "변경 전후를 측정하면 개선이 실제로 효과가 있었는지 알 수 있습니다.",
        "메모리가 부족하면 데이터를 일정한 크기로 나누어 처리하세요.",
        "분기마다 작은 단위 테스트를 작성하면 회귀를 일찍 발견할 수 있습니다.",
        "공개 인터페이스는 안정적으로 유지하고 구현 세부 사항은 숨기세요.",
    ],
}
THINK_SENTENCES = [
    "The user wants a concrete method, not just theory.",
    "I should check whether the input can be empty.",
    "A quick estimate of the cost helps choose the approach.",
    "Two approaches exist; the in-place one uses less memory.",
    "I need to mention how to verify the result.",
    "The edge cases matter more than the happy path here.",
]
FOLLOW_UPS = {
    "en": "Thanks! Could you also show how to test that approach?",
    "zh": "谢谢！能再说明一下怎么测试这个方法吗？",
    "ja": "ありがとうございます。その方法のテスト方法も教えてください。",
    "ko": "감사합니다! 그 방법을 테스트하는 방법도 알려주시겠어요?",
}
GREETINGS = ["hi", "hello!", "你好", "こんにちは", "안녕하세요"]
REFUSALS = {
    "en": "I'm sorry, but I can't help with that request.",
    "zh": "非常抱歉，我无法提供这方面的帮助。",
    "ja": "申し訳ありませんが、そのご要望にはお応えできません。",
    "ko": "죄송하지만 해당 요청에는 도움을 드릴 수 없습니다.",
}
PUSHBACK = {
    "en": "Please, it is really important for my project.",
    "zh": "拜托了，这对我的项目真的很重要。",
    "ja": "お願いします、私のプロジェクトにとって本当に大事なんです。",
    "ko": "제발요, 제 프로젝트에 정말 중요한 일이에요.",
}
DEAD_LOOP = "Wait... no wait, actually let me reconsider. Hmm, I keep making the same mistake. " * 8
TOKEN_SOUP = "<|im_end|><|endoftext|>\ufffd\ufffd" * 12 + "ok"
BAD_LINES = ['{"messages": [{"role": "user", "content": "truncated', "[]", "not json at all", '"a string"']


def _answer(rng: random.Random, lang: str) -> str:
    sep = " " if lang == "en" else ""
    return sep.join(rng.sample(SENTENCES[lang], rng.randrange(4, 7))) + f"{sep}(ref {rng.randrange(10**6)})"


def _think(rng: random.Random) -> str:
    return "<think>" + " ".join(rng.sample(THINK_SENTENCES, 5)) + "</think>"


def _question(rng: random.Random, lang: str) -> str:
    return rng.choice(QUESTIONS[lang]) + f" (#{rng.randrange(10**6)})"


def _tool_row(rng: random.Random, lang: str, i: int) -> list[dict]:
    question = _question(rng, lang)
    arguments = json.dumps({"query": question[:40]}, ensure_ascii=False)
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "web_search", "arguments": arguments}}
    ]
    return [
        {"role": "system", "content": "You are an assistant that can call tools."},
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": json.dumps(calls, ensure_ascii=False) if i % 2 else calls,
        },
        {
            "role": "tool",
            "content": f"Top results: {rng.randrange(2, 9)} relevant pages were found.",
            "tool_call_id": f"call_{i}",
        },
        {"role": "assistant", "content": _answer(rng, lang)},
    ]


def make_messages(kind: str, rng: random.Random, i: int) -> list[dict]:
    lang = rng.choice(list(QUESTIONS))
    question = _question(rng, lang)
    if kind == "trivial_greeting":
        return [
            {"role": "user", "content": rng.choice(GREETINGS)},
            {"role": "assistant", "content": "Hello! How can I help?"},
        ]
    if kind == "shallow_reply":
        return [{"role": "user", "content": question}, {"role": "assistant", "content": "Sure."}]
    if kind == "dead_loop":
        return [{"role": "user", "content": question}, {"role": "assistant", "content": DEAD_LOOP}]
    if kind == "refusal":  # two rounds, so it is not also a shallow two-turn exchange
        return [
            {"role": "user", "content": question},
            {"role": "assistant", "content": REFUSALS[lang]},
            {"role": "user", "content": PUSHBACK[lang]},
            {"role": "assistant", "content": REFUSALS[lang]},
        ]
    if kind == "token_soup":
        return [
            {"role": "user", "content": question},
            {"role": "assistant", "content": TOKEN_SOUP + _answer(rng, lang)},
        ]
    if kind == "heartbeat":
        return [
            {"role": "user", "content": question},
            {"role": "assistant", "content": _answer(rng, lang)},
            {"role": "user", "content": "heartbeat"},
            {"role": "assistant", "content": "heartbeat ok"},
            {"role": "user", "content": FOLLOW_UPS[lang]},
            {"role": "assistant", "content": _answer(rng, lang)},
        ]
    if kind == "cline_tool_call":
        return [
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": "Let me look at the file first.\n<read_file>\n<path>src/main.py</path>\n</read_file>",
            },
            {"role": "user", "content": "[read_file for 'src/main.py'] Result:\nprint('hello')"},
            {"role": "assistant", "content": _answer(rng, lang)},
        ]
    shape = rng.random()
    if shape < 0.25:
        return _tool_row(rng, lang, i)
    first = (_think(rng) if shape < 0.45 else "") + _answer(rng, lang)
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": first}]
    for _ in range(rng.randrange(0, 3)):
        messages += [
            {"role": "user", "content": FOLLOW_UPS[lang]},
            {"role": "assistant", "content": _answer(rng, lang)},
        ]
    return messages


def generate_rows(n: int, seed: int = 0) -> tuple[list, Counter]:
    """``n`` base rows plus duplicates and bad lines, shuffled; returns (rows or bad strings, kinds)."""
    rng = random.Random(seed)
    kinds: Counter = Counter()
    rows: list = []
    for i in range(n):
        roll, kind, acc = rng.random(), "clean", 0.0
        for name, share in DEFECT_SHARES.items():
            acc += share
            if roll < acc:
                kind = name
                break
        kinds[kind] += 1
        rows.append(
            {
                "id": f"s{seed}-{i}",
                "source": "sample",
                "model_id": "demo-model",
                "messages": make_messages(kind, rng, i),
            }
        )
    for row in rng.sample(rows, int(n * DUPLICATE_SHARE)):
        copy = json.loads(json.dumps(row))
        copy["id"] += "-dup"
        if rng.random() < 0.5 and copy["messages"][-1]["role"] == "assistant":
            copy["messages"] += [
                {"role": "user", "content": "One more question: any pitfalls?"},
                {"role": "assistant", "content": "Watch the edge cases."},
            ]
            kinds["duplicate_extended"] += 1
        else:
            kinds["duplicate_exact"] += 1
        rows.append(copy)
    for j in range(max(1, int(n * BAD_LINE_SHARE))):
        rows.append(BAD_LINES[j % len(BAD_LINES)])
        kinds["bad_line"] += 1
    rng.shuffle(rows)
    return rows, kinds


def write_jsonl(rows: list, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=int, default=400, help="base rows (duplicates and bad lines come on top)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--shards", type=int, default=1, help="split into this many chats-NNNNN.jsonl files")
    args = parser.parse_args(argv)
    rows, kinds = generate_rows(args.rows, args.seed)
    if args.shards == 1:
        write_jsonl(rows, args.out / "chats.jsonl")
    else:
        per = -(-len(rows) // args.shards)
        for s in range(args.shards):
            write_jsonl(rows[s * per : (s + 1) * per], args.out / f"chats-{s:05d}.jsonl")
    manifest = {
        "rows": args.rows,
        "seed": args.seed,
        "lines": len(rows),
        "kinds": dict(sorted(kinds.items())),
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(rows)} lines to {args.out}: {dict(sorted(kinds.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
