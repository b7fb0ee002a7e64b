"""The rollout job's parts that need no cluster: config checks, prompt reading and ids, the journal
(torn lines, resume refusal, Parquet), the demo config and prompts, the worker's Ray options."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from twinkle_agentic.actors.config import EngineConfig, RolloutSpec
from twinkle_agentic.actors.worker import RolloutWorker, error_trajectory
from twinkle_agentic.jobs.rollout.config import ConfigError, build_parser, config_from_mapping, resolve_config
from twinkle_agentic.jobs.rollout.journal import Journal
from twinkle_agentic.jobs.rollout.prompts import PromptError, load_prompts, to_trajectories

from scripts import dialogues
from tests.support.paths import REPO_ROOT
from twinkle_agentic.data_format import SamplingParams

DEMO_CONFIG = REPO_ROOT / "jobs" / "configs" / "demo_rollout.yaml"
DEMO_PROMPTS = REPO_ROOT / "data" / "sample" / "rollout_prompts.jsonl"


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# -- config ------------------------------------------------------------------------------------------


def test_demo_config_resolves_with_paths_relative_to_it_and_flags_winning(tmp_path):
    args = build_parser().parse_args(["--config", str(DEMO_CONFIG), "--output", str(tmp_path), "--engines", "1"])
    cfg = resolve_config(args)
    assert Path(cfg.prompts) == DEMO_PROMPTS
    assert cfg.engines == 1 and cfg.output == str(tmp_path)
    assert [t.name for t in cfg.tools] == ["demo_tools"] and [e.name for e in cfg.envs] == ["guess_number"]
    engine = cfg.engine_config()
    assert engine.kv_cache_space_gb == 1 and engine.max_model_len == 1024 and engine.num_gpus == 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"enginez": {}}, r"unknown key\(s\) \['enginez'\]"),
        ({"engine": {"num_cpu": 1}}, "engine: unknown key"),
        ({"engine": {"kv_cache_space_gb": 0.5}}, "kv_cache_space_gb must be an integer"),
        ({"engine": {"num_gpus": 1, "kv_cache_space_gb": 1}}, "CPU engines only"),
        ({"engine": {"tensor_parallel_size": 2, "num_gpus": 1}}, "needs num_gpus=2"),
        ({"sampling": {"temperatur": 0}}, r"sampling key\(s\) \['temperatur'\] are neither"),
        ({"sampling": {"num_samples": 2}}, "samples_per_prompt"),
        ({"sampling": {"temperature": -1}}, "temperature"),
        ({"mode": "turbo"}, "mode 'turbo' is not available"),
        ({"engines": 0}, "engines must be a positive integer"),
        ({"tools": [{"name": "t"}]}, "give either tools"),
        ({"tools": [{"name": "t", "tools": ["m:f"], "url": "http://x"}]}, "give either tools"),
        ({"tools": [{"name": "t", "tool": ["m:f"]}]}, "unknown key"),
        ({"envs": [{"name": "demo_tools", "env": "m:E"}]}, "unique"),
        ({"output_format": "csv"}, "output_format"),
    ],
)
def test_bad_config_is_refused_naming_the_setting(tmp_path, change, message):
    data = {"prompts": str(DEMO_PROMPTS), "output": str(tmp_path), "tools": [{"name": "demo_tools", "tools": ["m:f"]}]}
    data.update(change)
    with pytest.raises(ConfigError, match=message):
        config_from_mapping(data).validate()


def test_missing_prompts_or_output_is_refused():
    with pytest.raises(ConfigError, match="no prompts"):
        config_from_mapping({"output": "x"}).validate()
    with pytest.raises(ConfigError, match="no output"):
        config_from_mapping({"prompts": "x"}).validate()


def test_cpu_engine_process_settings_and_ray_options():
    engine = EngineConfig("m", num_cpus=2, env_vars={"VLLM_LOGGING_LEVEL": "ERROR"})
    options = RolloutWorker.ray_options(engine)
    env = options["runtime_env"]["env_vars"]
    assert options["num_cpus"] == 2 and options["num_gpus"] == 0 and options["max_restarts"] == 0
    assert options["max_concurrency"] == 1  # sync mode: batches run in the order they were sent
    assert env["OMP_NUM_THREADS"] == "2" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and env["VLLM_LOGGING_LEVEL"] == "ERROR"
    assert engine.sampler_kwargs()["engine_kwargs"]["distributed_executor_backend"] == "uni"
    gpu = EngineConfig("m", num_gpus=1)
    assert "VLLM_CPU_KVCACHE_SPACE" not in gpu.process_env() and "VLLM_ENABLE_V1_MULTIPROCESSING" not in gpu.process_env()
    assert "distributed_executor_backend" not in gpu.sampler_kwargs()["engine_kwargs"]


# -- prompts -----------------------------------------------------------------------------------------


def test_bad_prompt_rows_are_all_listed_with_their_lines(tmp_path):
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"prompt": "ok"},
            "{not json",
            {"messages": []},
            {"messages": [{"role": "robot", "content": "x"}]},
            {"prompt": "x", "messages": [{"role": "user", "content": "y"}]},
            {"prompt": "x", "envs": 3},
            [1, 2],
        ],
    )
    with pytest.raises(PromptError) as info:
        load_prompts(str(path))
    text = str(info.value)
    assert "6 prompt row(s)" in text
    for line in ("line 2: not JSON", "line 3: needs 'messages'", "line 4: messages[0].role", "line 5: has both", "line 6: 'envs'", "line 7: must be a JSON object"):
        assert line in text


def test_prompts_as_a_json_array_compressed_or_not_utf8(tmp_path):
    """Prompt files read as the preprocess job reads inputs: a .json array, any compression, bytes
    that are not UTF-8 reported as a bad row (they stopped the run with a traceback before)."""
    import bz2

    rows = [{"id": "a", "prompt": "hi"}, {"id": "b", "messages": [{"role": "user", "content": "héllo"}]}]
    (tmp_path / "p.json").write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    assert load_prompts(str(tmp_path / "p.json")) == rows
    (tmp_path / "p.jsonl.bz2").write_bytes(bz2.compress("\n".join(json.dumps(r) for r in rows).encode()))
    assert load_prompts(str(tmp_path / "p.jsonl.bz2")) == rows
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(PromptError, match=r"1 prompt row\(s\) cannot be rolled out: line 2: not JSON \('utf-8' codec"):
        load_prompts(str(tmp_path / "latin1.jsonl"))
    (tmp_path / "cut.json").write_text(json.dumps(rows)[:30])
    with pytest.raises(PromptError, match=r"cannot read prompts .*cut\.json: the file ends inside the array, before element 2"):
        load_prompts(str(tmp_path / "cut.json"))
    with pytest.raises(PromptError, match="cannot read prompts"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_ids_are_stable_unique_and_expand_per_sample(tmp_path):
    rows = [{"id": "a", "prompt": "hi"}, {"prompt": "same"}, {"prompt": "same"}, {"prompt": "other", "kind": "x"}]
    once = to_trajectories(rows)
    assert [t["trajectory_id"] for t in once][:1] == ["a"]
    assert once[1]["trajectory_id"] != once[2]["trajectory_id"] and once[2]["trajectory_id"].endswith("~2")
    assert once[1]["messages"] == [{"role": "user", "content": "same"}] and "prompt" not in once[1]
    assert once[3]["kind"] == "x"
    assert [t["trajectory_id"] for t in to_trajectories(rows)] == [t["trajectory_id"] for t in once]  # stable
    grouped = to_trajectories(rows[:1], samples_per_prompt=3)
    assert [t["trajectory_id"] for t in grouped] == ["a/s0", "a/s1", "a/s2"]
    assert {t["prompt_id"] for t in grouped} == {"a"} and [t["sample_index"] for t in grouped] == [0, 1, 2]
    with pytest.raises(PromptError, match="unique"):
        to_trajectories([{"id": 1, "prompt": "x"}, {"id": "1", "prompt": "y"}])


def test_parquet_prompts_with_messages_as_json_text(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"id": ["p1"], "messages": [json.dumps([{"role": "user", "content": "hi"}])]})
    pq.write_table(table, tmp_path / "p.parquet")
    (row,) = load_prompts(str(tmp_path / "p.parquet"))
    assert row["messages"] == [{"role": "user", "content": "hi"}]


def test_demo_prompts_are_valid_and_cover_every_kind():
    rows = load_prompts(str(DEMO_PROMPTS))
    kinds = {r["kind"] for r in rows}
    assert kinds == {"weather", "calculator", "two_city", "game", "chat"}
    games = [r for r in rows if r["kind"] == "game"]
    assert all(r["envs"] == ["guess_number"] and r["toolsets"] == [] for r in games)
    assert all(dict(r["user_data"])["target"] == r["ground_truth"][0] for r in games)
    for row in rows:  # every prompt is a held-out phrasing of its kind
        text = row["messages"][0]["content"]
        if row["kind"] == "chat":
            assert text in {user for user, _ in dialogues.CHAT_TURNS["heldout"]}, text
        else:
            assert any(re.search(phrase_regex(p), text) for p in HELDOUT[row["kind"]]), text
            assert not any(re.fullmatch(phrase_regex(p), text) for p in TRAIN[row["kind"]]), text


HELDOUT = {"weather": dialogues.WEATHER_PHRASES["heldout"], "two_city": dialogues.TWO_CITY_PHRASES["heldout"],
           "calculator": dialogues.CALC_PHRASES["heldout"], "game": dialogues.GAME_PHRASES["heldout"]}  # fmt: skip
TRAIN = {"weather": dialogues.WEATHER_PHRASES["train"], "two_city": dialogues.TWO_CITY_PHRASES["train"],
         "calculator": dialogues.CALC_PHRASES["train"], "game": dialogues.GAME_PHRASES["train"]}  # fmt: skip


def phrase_regex(template: str) -> str:
    pieces = re.split(r"(\{\w+\})", template)
    operators = "|".join(word for word, _ in dialogues.OPERATORS)
    word = r"(?:[A-Z][a-z]+|\d+)"  # a city, or an operand
    slots = {"{city}": word, "{a}": word, "{b}": word, "{op}": f"(?:{operators})", "{sym}": r"[-+*]"}
    return "".join(slots.get(piece, re.escape(piece)) for piece in pieces)


# -- journal -----------------------------------------------------------------------------------------

FINGERPRINT = {"model": "m", "sampling": {"temperature": 0}}


def record(tid: str, reason: str = "stop") -> dict:
    return {"trajectory_id": tid, "prompt_id": tid, "stop_reason": reason, "input_ids": [1, 2], "labels": [-100, 2],
            "logprobs": [-0.5], "attention_mask": [1, 1], "position_ids": [0, 1], "messages": [{"role": "user", "content": tid}]}  # fmt: skip


def test_journal_appends_whole_batches_and_resume_cuts_a_torn_line(tmp_path):
    journal, state = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    assert not state.ids
    journal.append([record("a"), record("b", "length")])
    journal.close()
    with open(journal.path, "ab") as handle:  # the process died mid-write of the next batch
        handle.write(b'{"trajectory_id": "c", "stop_')
    journal, state = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    assert state.ids == {"a", "b"} and state.truncated_bytes > 0 and state.stop_reasons == {"stop": 1, "length": 1}
    journal.append([record("c")])
    journal.close()
    lines = Path(journal.path).read_text().splitlines()
    assert [json.loads(line)["trajectory_id"] for line in lines] == ["a", "b", "c"]
    assert "attention_mask" not in json.loads(lines[0])  # derivable columns are not stored


def test_resuming_with_other_settings_or_into_a_foreign_directory_is_refused(tmp_path):
    Journal.open(str(tmp_path / "run"), FINGERPRINT, overwrite=False)[0].append([record("a")])
    with pytest.raises(ConfigError, match="other settings.*sampling"):
        Journal.open(str(tmp_path / "run"), {**FINGERPRINT, "sampling": {"temperature": 1}}, overwrite=False)
    _, state = Journal.open(str(tmp_path / "run"), {**FINGERPRINT, "sampling": {"temperature": 1}}, overwrite=True)
    assert not state.ids
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "trajectories.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match="not a rollout run"):
        Journal.open(str(foreign), FINGERPRINT, overwrite=False)


def test_parquet_output_has_typed_token_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    journal, _ = Journal.open(str(tmp_path), FINGERPRINT, overwrite=False)
    failed = error_trajectory({"trajectory_id": "e", "messages": [{"role": "user", "content": "x"}], "kind": "calc"}, "Boom: x")
    journal.append([record("a"), {**failed, "env_rewards": {"guess_number": 1.0}}])
    journal.close()
    table = pq.read_table(journal.write_parquet())
    assert table.num_rows == 2
    assert table.schema.field("input_ids").type == pa.list_(pa.int32())
    assert table.schema.field("logprobs").type == pa.list_(pa.float32())
    rows = table.to_pylist()
    assert rows[0]["labels"] == [-100, 2] and json.loads(rows[0]["messages"])[0]["content"] == "a"
    assert rows[1]["stop_reason"] == "error" and rows[1]["error"] == "Boom: x" and rows[1]["truncated"] is True
    assert json.loads(rows[1]["env_rewards"]) == {"guess_number": 1.0} and json.loads(rows[1]["extra"]) == {"kind": "calc"}


def test_rollout_spec_defaults_validate():
    assert RolloutSpec().validate().sampling == SamplingParams(temperature=0.0, max_tokens=128)


# -- the command -------------------------------------------------------------------------------------


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path, capsys):
    from twinkle_agentic.jobs.rollout import main

    assert main(["--config", str(DEMO_CONFIG), "--output", str(tmp_path / "out"), "--limit", "5", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# 5 trajectories from" in out and "tool server demo_tools: deploy" in out and "env server guess_number" in out
    assert not (tmp_path / "out").exists()


def test_bad_input_exits_2_naming_the_problem(tmp_path, capsys):
    from twinkle_agentic.jobs.rollout import main

    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "hi", "toolsets": ["search"]}])
    assert main(["--prompts", str(prompts), "--output", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "asks for toolsets ['search'], which this config does not serve" in captured.err
    assert "rollout: not started" in captured.out


def test_a_finished_run_resumes_to_nothing_without_a_cluster(tmp_path, capsys):
    """Every trajectory is already in the journal: the job reports and exits without starting Ray."""
    from twinkle_agentic.jobs.rollout import main
    from twinkle_agentic.jobs.rollout.config import config_from_mapping

    output = tmp_path / "out"
    argv = ["--config", str(DEMO_CONFIG), "--output", str(output), "--limit", "3", "--no-progress"]
    cfg = resolve_config(build_parser().parse_args(argv))
    journal, _ = Journal.open(str(output), cfg.fingerprint(), overwrite=False)
    journal.append([record(tid) for tid in ("weather-001", "weather-002", "weather-003")])
    journal.close()
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "rollout: 0 new trajectories" in out and "3 resumed from an earlier run" in out
    assert json.loads((output / "summary.json").read_text())["trajectories_in_output"] == 3
    assert config_from_mapping({"prompts": "p", "output": "o"}).fingerprint()["model"].startswith("sha256:")


def test_percentiles_and_figures():
    from twinkle_agentic.actors.activity import Activity, ToolCallTiming
    from twinkle_agentic.jobs.rollout.summary import RolloutTally, percentile, rollout_figures

    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile(list(range(1, 101)), 99) == 99
    tally = RolloutTally()
    calls = [ToolCallTiming("get_weather", 0.01 * i, i != 3) for i in range(1, 5)]
    tally.add([{"stop_reason": "stop", "input_ids": [1, 2, 3]}], Activity(4.0, 2.4, 1.2, calls), 40)
    figures = rollout_figures(tally, rollout_s=5.0, engines=1)
    assert figures["trajectories_per_s"] == 0.2 and figures["generated_tokens_per_s"] == 8.0
    assert figures["engine_idle_waiting_for_tools"] == 0.3 and figures["engine_busy_share"] == 0.6
    assert figures["worker_utilisation"] == 0.8 and figures["other_share"] == 0.1
    assert figures["tools"]["get_weather"] == {"calls": 4, "errors": 1, "p50_s": 0.02, "p99_s": 0.04}


def test_an_interrupted_run_says_how_to_resume(tmp_path, capsys, monkeypatch):
    from twinkle_agentic.jobs.rollout import job, main

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "run", interrupted)
    output = tmp_path / "out"
    argv = ["--config", str(DEMO_CONFIG), "--output", str(output), "--limit", "3", "--no-progress"]
    assert main(argv) == 130
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("rollout: interrupted after ") and last.endswith(f"resume; output: {output}")
