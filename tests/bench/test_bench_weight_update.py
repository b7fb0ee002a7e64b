"""The weight-update bench's pure helpers: the Qwen2 parameter count its synthetic model is sized by,
and how a farm's update reports become table cells."""

from __future__ import annotations

import pytest
from twinkle_agentic.actors.driver import FarmUpdate

from bench.weight_update import flatten, median_cell, qwen2_parameters, table, versions_of


def test_the_parameter_formula_matches_a_transformers_qwen2_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(vocab=96, hidden=64, layers=2, intermediate=160, heads=4, kv_heads=2)
    config = Qwen2Config(
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"],
        intermediate_size=shape["intermediate"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config)
    assert qwen2_parameters(**shape) == sum(p.numel() for p in model.parameters())


def test_a_hidden_size_the_heads_do_not_divide_is_refused():
    with pytest.raises(ValueError, match="not a multiple of the 5 attention heads"):
        qwen2_parameters(vocab=10, hidden=64, layers=1, intermediate=8, heads=5, kv_heads=1)


def report(wall: float, ray_calls: int = 2, **worker) -> FarmUpdate:
    account = {"wait_s": 0.0, "drain_s": 0.0, "load_s": wall / 2, "reset_s": 0.001, "paused_s": wall / 2,
               "total_s": wall / 2, "transfer_s": 0.002, "rpc_calls": 3, **worker}  # fmt: skip
    return FarmUpdate(
        1, 38, 1024, prepare_s=0.01, put_s=0.02, wall_s=wall, ray_calls=ray_calls, workers={0: account}
    )


def test_cells_are_medians_of_the_timings_and_the_counts_must_agree():
    cell = median_cell([flatten(report(w)) for w in (0.3, 0.1, 0.2)])
    assert cell["wall_s"] == pytest.approx(0.2) and cell["load_s"] == pytest.approx(0.1)
    assert (cell["ray_calls"], cell["rpc_calls"], cell["tensors"], cell["payload_bytes"]) == (2, 3, 38, 1024)
    with pytest.raises(ValueError, match=r"ray_calls differs between rounds: \[2, 3\]"):
        median_cell([flatten(report(0.1)), flatten(report(0.1, ray_calls=3))])
    with pytest.raises(ValueError, match="no updates"):
        median_cell([])


def test_an_update_that_did_not_reach_exactly_one_worker_is_not_a_measurement():
    failed = report(0.1)
    failed.failed[0] = "actor died"
    with pytest.raises(RuntimeError, match="actor died"):
        flatten(failed)


def test_the_table_has_a_row_per_model_and_path_in_milliseconds():
    cell = median_cell([flatten(report(0.25))])
    lines = table({"tiny": {"checkpoint": cell, "memory": cell}}).splitlines()
    assert len(lines) == 3 and "checkpoint" in lines[1] and "memory" in lines[2]
    assert "250.0ms" in lines[1]


def test_versions_of_a_trajectory_come_from_its_spans():
    spans = [{"version": 0, "start": 3, "end": 9}, {"version": 1, "start": 9, "end": 20}]
    assert versions_of({"policy_versions": spans}) == {0, 1}
    assert versions_of({"policy_versions": None}) == set()
