#!/usr/bin/env python
"""Train the project's tiny tool-calling model on CPU and write it in HF format.

    python scripts/train_tiny_model.py --out twinkle_agentic/assets/tiny_agent

Steps (all seeded, so a rerun with the same arguments and thread count rebuilds the same model):
1. Render a sample of synthetic dialogues (``scripts/dialogues.py``) with the chat template
   and train a byte-level BPE on them. The pre-tokenizer isolates every whitespace character and
   every digit, so a city or a number is the same token sequence in the user text, in the JSON of a
   tool call and in a tool result: copying is then token-for-token.
2. Build a Qwen2-shaped model (head_dim 64, the size vLLM's CPU attention supports) and train it on
   freshly sampled dialogues, with the loss on assistant tokens only (each assistant turn through its
   ``<|im_end|>``).
3. Every ``--eval-every`` steps, measure teacher-forced exactness on held-out prompts: the share of
   assistant turns whose every token is the argmax prediction. An exact turn is what greedy decoding
   reproduces, so this tracks the temperature-0 behaviour without running generation. The model is
   saved at each evaluation.

``scripts/eval_tiny_model.py`` then measures the saved model with vLLM, as it is used.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts import dialogues  # noqa: E402

TEMPLATE_PATH = ROOT / "twinkle_agentic" / "demo" / "chat_template.jinja"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added (not special) so decoding with skip_special_tokens keeps them for the tool-call parser.
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# BPE is trained on pieces of one whitespace char, one digit, one punctuation char or one run of
# letters, so merges only ever join letters: a city is one token whether a space, a quote or nothing
# precedes it, and numbers are copied digit by digit.
TRAIN_PRETOKENIZE_PATTERN = r"\s|\p{N}|\p{L}+|[^\s\p{L}\p{N}]"
# The model is a Qwen2, so transformers' AutoTokenizer loads its tokenizer as Qwen2Tokenizer, which
# replaces the pre-tokenizer with Qwen2's split pattern (the one below). Every Qwen2 piece is a
# concatenation of the training pieces and no merge crosses a training piece, so both split the
# same text into the same tokens; build_tokenizer checks that on a sample before anything trains.
QWEN2_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
IGNORE_INDEX = -100


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "twinkle_agentic" / "assets" / "tiny_agent"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=3000, help="length of the learning-rate schedule")
    p.add_argument(
        "--stop-after", type=int, default=None, help="stop (evaluate and save) after this many steps of the schedule"
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--intermediate-size", type=int, default=512)
    p.add_argument("--max-positions", type=int, default=1024)
    p.add_argument("--tokenizer-dialogues", type=int, default=20000)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-per-kind", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    return p


# -- tokenizer ----------------------------------------------------------------------------------------


def render(tokenizer: Any, dialogue: dict[str, Any], add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(
        dialogue["messages"],
        tools=dialogue.get("tools") or None,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
    )


def _pre_tokenizer(pattern: str) -> Any:
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def build_tokenizer(args: argparse.Namespace, template: str) -> Any:
    """Train the BPE, save it in HF format and return it as ``AutoTokenizer`` loads it for inference."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config

    # Render the corpus with a throwaway tokenizer carrying the template.
    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=template)
    rng = random.Random(args.seed + 1)
    corpus = [render(renderer, dialogues.sample_dialogue(rng)) for _ in range(args.tokenizer_dialogues)]
    marked = SPECIAL_TOKENS + MARKUP_TOKENS
    plain = corpus
    for token in marked:  # keep the markup out of the merges; it becomes single added tokens
        plain = [text.replace(token, " ") for text in plain]

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = _pre_tokenizer(TRAIN_PRETOKENIZE_PATTERN)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size - len(marked),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(plain, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    reference = [tok.encode(text).ids for text in corpus[:2000]]

    tok.pre_tokenizer = _pre_tokenizer(QWEN2_PRETOKENIZE_PATTERN)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=template,
        model_max_length=args.max_positions,
        clean_up_tokenization_spaces=False,
    )
    with tempfile.TemporaryDirectory() as workdir:
        hf.save_pretrained(workdir, save_jinja_files=False)
        Qwen2Config().save_pretrained(workdir)  # so AutoTokenizer resolves the class inference will use
        loaded = AutoTokenizer.from_pretrained(workdir)
    for text, ids in zip(corpus, reference, strict=False):
        got = loaded.encode(text, add_special_tokens=False)
        if got != ids:
            raise RuntimeError(
                f"{type(loaded).__name__} tokenizes differently from the training pre-tokenizer:\n{text!r}\n"
                f"{loaded.convert_ids_to_tokens(got)}\n{loaded.convert_ids_to_tokens(ids)}"
            )
    return loaded


# -- data ---------------------------------------------------------------------------------------------


class Encoder:
    """Dialogue -> (input_ids, labels) with labels on assistant turns only, through ``<|im_end|>``."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def __call__(self, dialogue: dict[str, Any]) -> tuple[list[int], list[int]]:
        ids = self.tokenizer.encode(render(self.tokenizer, dialogue), add_special_tokens=False)
        labels = [IGNORE_INDEX] * len(ids)
        n, i = len(self.header), 0
        while i < len(ids):
            if ids[i : i + n] == self.header:
                j = i + n
                while j < len(ids):
                    labels[j] = ids[j]
                    if ids[j] == self.im_end:
                        break
                    j += 1
                i = j
            i += 1
        return ids, labels

    def turn_spans(self, ids: list[int]) -> list[tuple[int, int]]:
        """[start, end) of each assistant turn's tokens (through ``<|im_end|>``)."""
        spans, n, i = [], len(self.header), 0
        while i < len(ids):
            if ids[i : i + n] == self.header:
                j = i + n
                while j < len(ids) and ids[j] != self.im_end:
                    j += 1
                spans.append((i + n, min(j + 1, len(ids))))
                i = j
            i += 1
        return spans


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int, multiple: int = 64) -> dict[str, Any]:
    import torch

    width = max(len(ids) for ids, _ in batch)
    width = ((width + multiple - 1) // multiple) * multiple
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, labs) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(labs)] = torch.tensor(labs)
        mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}


def batches(encoder: Encoder, rng: random.Random, batch_size: int, pool_batches: int = 8):
    """Endless batches; each pool of dialogues is sorted by length so a batch pads little."""
    while True:
        pool = [encoder(dialogues.sample_dialogue(rng)) for _ in range(batch_size * pool_batches)]
        pool.sort(key=lambda item: len(item[0]))
        chunks = [pool[i : i + batch_size] for i in range(0, len(pool), batch_size)]
        rng.shuffle(chunks)
        yield from chunks


# -- model --------------------------------------------------------------------------------------------


def build_model(args: argparse.Namespace, tokenizer: Any) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = ((len(tokenizer) + 63) // 64) * 64
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden_size // 64,
        num_key_value_heads=args.hidden_size // 64,
        max_position_embeddings=args.max_positions,
        max_window_layers=args.layers,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(args.seed)
    return Qwen2ForCausalLM(config)


def heldout_eval(model: Any, encoder: Encoder, per_kind: int) -> dict[str, float]:
    """Teacher-forced exactness of held-out assistant turns: first turn (the tool call) and last turn."""
    import torch

    episodes = dialogues.heldout_prompts(per_kind)
    results: dict[str, list[tuple[bool, bool]]] = {}
    model.eval()
    with torch.no_grad():
        for start in range(0, len(episodes), 32):
            chunk = episodes[start : start + 32]
            encoded = [encoder({"messages": e.messages, "tools": e.tools}) for e in chunk]
            batch = collate(encoded, encoder.tokenizer.pad_token_id)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            predicted = logits.argmax(-1)
            for row, (episode, (ids, _)) in enumerate(zip(chunk, encoded, strict=True)):
                exact = []
                for s, e in encoder.turn_spans(ids):
                    target = batch["input_ids"][row, s:e]
                    exact.append(bool((predicted[row, s - 1 : e - 1] == target).all()))
                results.setdefault(episode.kind, []).append((exact[0], all(exact)))
    model.train()
    summary = {}
    for kind, rows in results.items():
        summary[f"{kind}/first"] = sum(f for f, _ in rows) / len(rows)
        summary[f"{kind}/all"] = sum(a for _, a in rows) / len(rows)
    return summary


def save(model: Any, tokenizer: Any, out: Path) -> None:
    from transformers import GenerationConfig

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp, save_jinja_files=False)
    config_path = tmp / "tokenizer_config.json"  # the generic class loads on transformers 4.x and 5.x
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    im_end, eot = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot, bos_token_id=eot).save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    out = Path(args.out)
    t0 = time.time()
    tokenizer = build_tokenizer(args, TEMPLATE_PATH.read_text())
    encoder = Encoder(tokenizer)
    sample = encoder(dialogues.sample_dialogue(random.Random(7)))[0]
    print(
        f"tokenizer: {type(tokenizer).__name__}, {len(tokenizer)} tokens, built in {time.time() - t0:.0f}s; "
        f"sample length {len(sample)}"
    )

    model = build_model(args, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, config {model.config.to_json_string(use_diff=True)}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < args.warmup_steps:
            return args.lr * (step + 1) / args.warmup_steps
        progress = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))

    stream = batches(encoder, random.Random(args.seed), args.batch_size)
    model.train()
    tokens, losses, t_start = 0, [], time.time()
    log: list[dict[str, Any]] = []
    last = min(args.steps, args.stop_after or args.steps)
    for step in range(last):
        batch = collate(next(stream), tokenizer.pad_token_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += int(batch["attention_mask"].sum())
        losses.append(float(loss.detach()))
        if (step + 1) % 50 == 0:
            elapsed = time.time() - t_start
            print(
                f"step {step + 1} loss {sum(losses) / len(losses):.4f} lr {lr_at(step):.2e} "
                f"{tokens / elapsed:.0f} tok/s elapsed {elapsed / 60:.1f} min",
                flush=True,
            )
            losses = []
        if (step + 1) % args.eval_every == 0 or step + 1 == last:
            summary = heldout_eval(model, encoder, args.eval_per_kind)
            log.append({"step": step + 1, "minutes": round((time.time() - t_start) / 60, 1), **summary})
            print("eval " + json.dumps(log[-1]), flush=True)
            save(model, tokenizer, out)
    print(f"done: {last} of {args.steps} scheduled steps in {(time.time() - t_start) / 60:.1f} min; saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
