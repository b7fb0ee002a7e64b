"""OpenAIBackend over HTTP against a scripted server that answers with vLLM's payload shapes."""

import logging
import math

import pytest

from twinkle_agentic.preprocessor import ScoreFilter
from twinkle_agentic.preprocessor.score import OpenAIBackend
from twinkle_agentic.preprocessor.score.backends.openai import server_root
from twinkle_agentic.testing.scripted_chat import byte_tokens, default_logprob, render_chatml


def backend(server, **kw) -> OpenAIBackend:
    return OpenAIBackend(server.url + "/v1", "scripted-model", timeout=10, max_retries=0, **kw)


def test_server_root():
    assert (
        server_root("http://h:8000/v1/") == "http://h:8000"
        and server_root("http://h:8000") == "http://h:8000"
    )


def test_tokenize_detokenize(scripted):
    b = backend(scripted)
    assert b.encode_text("hé") == byte_tokens("hé")
    messages = [{"role": "user", "content": "hi", "tool_calls": "", "tool_call_id": "", "finish_reason": "x"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert b.encode_chat(messages, tools=tools) == byte_tokens(
        render_chatml([{"role": "user", "content": "hi"}], True)
    )
    path, body = scripted.requests[-1]
    assert path == "/tokenize" and body["add_generation_prompt"] is True and body["tools"] == tools
    assert body["messages"] == [{"role": "user", "content": "hi"}]  # sanitised for the wire
    assert b.decode(byte_tokens("héllo")) == "héllo"


def test_prompt_logprobs_batch_and_failure_isolation(scripted, caplog):
    b = backend(scripted)
    good = byte_tokens("abcab")
    too_long = [65] * 5000  # the server refuses prompts over its max_model_len
    with caplog.at_level(logging.WARNING):
        out = b.prompt_logprobs([good, too_long, good[:3]])
    expected = [None] + [default_logprob(good[:k], good[k]) for k in range(1, len(good))]
    assert out == [expected, None, expected[:3]]
    completions = [body for path, body in scripted.requests if path == "/v1/completions"]
    assert completions[0]["prompt"] == [good, too_long, good[:3]] and completions[0]["prompt_logprobs"] == 1
    assert len(completions) == 4  # the batch, then one request per item
    assert "retrying one at a time" in caplog.text


def test_batches_are_split(scripted):
    out = backend(scripted, max_batch_size=2).prompt_logprobs([byte_tokens("xy")] * 5)
    assert len(out) == 5 and all(o == [None, -3.0] for o in out)
    assert scripted.paths().count("/v1/completions") == 3


def test_chat_and_embeddings(scripted):
    scripted.chat = lambda body: [f"{body['messages'][-1]['content']} #{i}" for i in range(body["n"])]
    b = backend(scripted)
    out = b.chat(
        [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]],
        n=3,
        temperature=0.5,
        max_tokens=7,
    )
    assert out == [["a #0", "a #1", "a #2"], ["b #0", "b #1", "b #2"]]
    body = next(b for p, b in scripted.requests if p == "/v1/chat/completions")
    assert body["n"] == 3 and body["temperature"] == 0.5 and body["max_tokens"] == 7
    assert b.embed(["abc", "de"]) == [[3.0, 1.0], [2.0, 1.0]]
    scripted.fail_paths.add("/v1/chat/completions")
    assert b.chat([[{"role": "user", "content": "a"}]], n=1, temperature=0, max_tokens=5) == [None]


def test_embed_on_another_server(scripted):
    from twinkle_agentic.testing.scripted_server import ScriptedServer

    other = ScriptedServer().start()
    try:
        other.embed = lambda text: [1.0, 2.0, 3.0]
        b = OpenAIBackend(scripted.url, "gen", embed_base_url=other.url + "/v1", embed_model="emb")
        assert b.embed(["x"]) == [[1.0, 2.0, 3.0]]
        assert other.requests[0][1]["model"] == "emb" and scripted.requests == []
    finally:
        other.stop()


def test_score_filter_end_to_end_on_scripted_logprobs(scripted):
    """ChrMin/SIFD read the server's prompt logprobs: an answer copied from the prompt is easy."""
    f = ScoreFilter(["sifd", "chr_min"], backend=backend(scripted), max_prompt_tokens=200)
    copy_row = {
        "id": "copy",
        "messages": [
            {"role": "user", "content": "Say: the quick brown fox"},
            {"role": "assistant", "content": "the quick brown fox"},
        ],
    }
    fresh_row = {
        "id": "fresh",
        "messages": [
            {"role": "user", "content": "Say: the quick brown fox"},
            {"role": "assistant", "content": "JUMPZ VXWQ 1234"},
        ],
    }
    kept, dropped = f([copy_row, fresh_row])
    # copied answer: every token was in the prompt -> positive deltas -> chr_min 1.0 >= 0.47 -> dropped
    assert [r["id"] for r in kept] == ["fresh"] and dropped[0]["drop_reason"] == "score_round_failed"
    assert f.last_summary["sifd"]["scored"] == 2

    # the exact SIFD of the copied answer, recomputed from the scripted logprob rule
    prompt = byte_tokens(render_chatml(copy_row["messages"][:1], True))
    answer = byte_tokens("the quick brown fox")
    deltas = [
        default_logprob(prompt + answer[:k], answer[k]) - default_logprob(answer[:k], answer[k])
        for k in range(1, len(answer))
    ]
    records = []
    ScoreFilter(["sifd"], backend=backend(scripted), trace_callback=records.append)([copy_row, fresh_row])
    copy_ifd, fresh_ifd = (r["scores"]["sifd"]["score"] for r in records)
    assert copy_ifd == pytest.approx(math.exp(-sum(deltas) / len(deltas)))
    assert copy_ifd < fresh_ifd  # the context helps the copied answer more
    assert records[0]["n_prompt"] == len(prompt) and records[0]["asst_ids"] == answer


def test_prompt_fitted_to_max_prompt_tokens(scripted):
    records = []
    f = ScoreFilter(["sifd"], backend=backend(scripted), max_prompt_tokens=120, trace_callback=records.append)
    messages = [{"role": "system", "content": "s"}]
    for i in range(5):
        messages += [
            {"role": "user", "content": f"question number {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    f([{"id": "long", "messages": messages}])
    last = records[-1]
    assert last["n_prompt"] <= 120 and last["messages"][0] == {"role": "system", "content": "s"}
    assert last["messages"][1]["content"] == "question number 4"  # oldest exchanges dropped


def test_backend_failure_gives_unmeasured_pass(scripted, caplog):
    scripted.fail_paths.add("/v1/completions")
    f = ScoreFilter(["sifd", "chr_min"], backend=backend(scripted))
    r = {
        "id": "x",
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "an answer here"}],
    }
    with caplog.at_level(logging.WARNING):
        kept, dropped = f([r])
    assert kept == [r] and dropped == []
    assert f.last_summary["sifd"]["scored"] == 0 and "prompt_logprobs failed" in caplog.text
