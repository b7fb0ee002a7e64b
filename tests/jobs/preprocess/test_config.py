"""Config resolution (defaults < YAML < flags) and the run's row accounting checks (no Ray)."""

from __future__ import annotations

from collections import Counter

import pytest
from twinkle_agentic.jobs.preprocess.config import build_parser, resolve_config
from twinkle_agentic.jobs.preprocess.frame import PART_SPACE
from twinkle_agentic.jobs.preprocess.job import (
    PARTITION_TARGET_BYTES,
    PUSH_BASED_MIN_BLOCKS,
    InvariantError,
    check_invariants,
    collect_stats,
    default_partitions,
    exchange_strategy,
    input_blocks,
    needs_split,
    partition_bounds,
)
from twinkle_agentic.jobs.preprocess.sink import SinkResult
from twinkle_agentic.jobs.preprocess.stages import READ_POSITION
from twinkle_agentic.jobs.preprocess.steps import ConfigError, StepSpec, build_step

from twinkle_agentic.io import Source
from twinkle_agentic.preprocessor.stats import StepStats


def resolve(*argv: str):
    return resolve_config(build_parser().parse_args(list(argv)))


def test_yaml_then_flags_and_paths_relative_to_the_yaml(tmp_path):
    config = tmp_path / "conf" / "pipeline.yaml"
    config.parent.mkdir()
    config.write_text(
        "inputs: data/*.jsonl\noutput: out\nbatch_size: 10\ndedup_partitions: 3\n"
        "steps:\n  - HardFilter: {min_user_chars: 4}\n  - DedupFilter\n"
    )
    cfg = resolve("--config", str(config))
    assert cfg.inputs == [str(tmp_path / "conf" / "data/*.jsonl")]
    assert cfg.output == str(tmp_path / "conf" / "out")
    assert (cfg.batch_size, cfg.dedup_partitions) == (10, 3)
    assert cfg.steps == [StepSpec("HardFilter", {"min_user_chars": 4}), StepSpec("DedupFilter")]
    cfg = resolve(
        "--config",
        str(config),
        "--batch-size",
        "7",
        "--input",
        "a.jsonl",
        "--input",
        "b.jsonl",
        "--no-progress",
    )
    assert (cfg.batch_size, cfg.inputs, cfg.progress) == (7, ["a.jsonl", "b.jsonl"], False)
    assert cfg.read_concurrency is None
    assert resolve("--config", str(config), "--read-concurrency", "32").read_concurrency == 32


def test_bundled_default_pipeline_is_used_without_config():
    cfg = resolve("--input", "x.jsonl", "--output", "out")
    names = [s.name for s in cfg.steps]
    assert names[-1] == "DedupFilter" and "HardFilter" in names and "MessageNormalizer" in names


@pytest.mark.parametrize(
    "yaml_text, argv, message",
    [
        ("colour: blue\n", [], r"unknown key\(s\) \['colour'\]"),
        ("overwrite: 'yes'\n", [], r"overwrite must be true or false, got 'yes' \(str\)"),
        ("batch_size: '10'\n", [], r"batch_size must be an integer, got '10'"),
        ("inputs: 3\n", [], "inputs must be a path or a list of paths, got 3"),
        ("steps: [HardFilter]\n", ["--batch-size", "0"], "batch_size must be a positive integer"),
        ("steps: [HardFilter]\n", ["--read-concurrency", "0"], "read_concurrency must be a positive integer"),
        ("- just a list\n", [], "must hold a mapping"),
        ("steps: [HardFilter\n", [], "not valid YAML"),
    ],
)
def test_config_errors_name_the_problem(tmp_path, yaml_text, argv, message):
    config = tmp_path / "p.yaml"
    config.write_text(yaml_text)
    with pytest.raises(ConfigError, match=message):
        resolve("--config", str(config), "--input", "x", "--output", "o", *argv)


@pytest.mark.parametrize(
    "step, kwargs, message",
    [
        (
            "HardFilter",
            {"min_user_chars": "10k"},
            r"min_user_chars must be an integer or null, got '10k' \(str\)",
        ),
        ("HardFilter", {"max_rounds": True}, "max_rounds must be an integer or null, got True"),
        ("DeadLoopFilter", {"cascade_window": None}, "cascade_window must be an integer, got None"),
        (
            "TokenSoupFilter",
            {"replacement_char_ratio": "1%"},
            "replacement_char_ratio must be a number or null",
        ),
        ("IntentClassifier", {"drop_no_key_rounds": "yes"}, "drop_no_key_rounds must be true or false"),
        ("MessageNormalizer", {"tool_calls_format": 3}, "tool_calls_format must be a string, got 3"),
    ],
)
def test_step_settings_of_the_wrong_type_are_refused_before_ray_starts(step, kwargs, message):
    """Most steps store settings as given: a wrong type used to build, then raise in the first batch."""
    with pytest.raises(ConfigError, match=f"step {step}: {message}"):
        build_step(StepSpec(step, kwargs))


def test_step_settings_of_the_right_types_build():
    assert build_step(StepSpec("HardFilter", {"min_user_chars": None, "system_deny_keywords": ["x"]}))
    assert build_step(StepSpec("TokenSoupFilter", {"replacement_char_ratio": 1}))  # an integer is a number
    assert build_step(StepSpec("tests.support.job_steps:ShoutMapper", {}))  # a step of one's own, annotated or not


def test_missing_input_or_output_is_a_config_error():
    with pytest.raises(ConfigError, match="--input"):
        resolve("--output", "o")
    with pytest.raises(ConfigError, match="--output"):
        resolve("--input", "x")


def sink_result(kept: int, drops: dict, stats: dict) -> SinkResult:
    return SinkResult(kept=kept, dropped=sum(drops.values()), drops=Counter(drops), stats=stats)


def test_row_accounting_accepts_a_consistent_run_and_rejects_lost_rows():
    stats = {
        READ_POSITION: StepStats("read", 10, 9, 1, 0.1, Counter(malformed_json=1)),
        0: StepStats("HardFilter", 9, 7, 2, 0.1, Counter(shallow_reply=2)),
    }
    good = sink_result(7, {("read", "malformed_json"): 1, ("HardFilter", "shallow_reply"): 2}, stats)
    check_invariants(good, collect_stats(good, ["HardFilter"]))

    lost = sink_result(6, {("read", "malformed_json"): 1, ("HardFilter", "shallow_reply"): 2}, stats)
    with pytest.raises(InvariantError, match="kept 6 \\+ dropped 3 != rows read 10"):
        check_invariants(lost, collect_stats(lost, ["HardFilter"]))

    wrong_ledger = sink_result(7, {("read", "malformed_json"): 1, ("HardFilter", "refusal"): 2}, stats)
    with pytest.raises(InvariantError, match="HardFilter/shallow_reply"):
        check_invariants(wrong_ledger, collect_stats(wrong_ledger, ["HardFilter"]))


@pytest.mark.parametrize(
    "sizes, cpus, split",
    [
        ([100] * 16, 2, False),  # many even shards: one read task per file keeps every CPU busy
        ([100] * 3, 4, True),  # fewer files than CPUs
        ([1000] + [10] * 20, 4, True),  # one file is most of the data
        ([None] * 8, 2, False),  # sizes unknown: decide by count
    ],
)
def test_records_are_re_blocked_only_when_files_alone_would_idle_cpus(sizes, cpus, split):
    sources = [Source(i, f"f{i}.jsonl", "jsonl", size) for i, size in enumerate(sizes)]
    assert needs_split(sources, cpus) is split


GIB = 1 << 30


@pytest.mark.parametrize(
    "cpus, input_bytes, partitions",
    [
        (2, 228 << 20, 4),  # the bench's 200k rows: two per CPU
        (2, int(1.2 * GIB), 4),  # its 1M rows: three by size, still under two per CPU
        (2, 20 * GIB, 40),  # a large corpus on a small node: by size, not four 5 GB partitions
        (3, 20 * GIB, 42),  # 40 by size, rounded up to a multiple of the CPUs
        (100, GIB, 64),  # a big cluster, small input: at most 64 by CPUs
        (100, 200 * GIB, 400),
        (1, 0, 2),
    ],
)
def test_default_dedup_partitions_follow_cpus_and_input_size(cpus, input_bytes, partitions):
    assert default_partitions(cpus, input_bytes) == partitions
    by_size = -(-input_bytes // PARTITION_TARGET_BYTES)
    if by_size > 2 * cpus:  # sized by the input: none above the target, whole rounds of CPUs
        assert input_bytes / partitions <= PARTITION_TARGET_BYTES and partitions % cpus == 0


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7, 64])
def test_partition_bounds_cut_the_hash_space_into_that_many_ranges(partitions):
    bounds = partition_bounds(partitions)
    assert bounds == sorted(set(bounds)) and all(isinstance(b, int) for b in bounds)
    edges = [0, *bounds, PART_SPACE]
    sizes = [hi - lo for lo, hi in zip(edges, edges[1:], strict=False)]
    if partitions == 1:  # one range holding the whole space, and an empty one after it
        assert sizes == [PART_SPACE, 0]
    else:
        assert len(sizes) == partitions and max(sizes) - min(sizes) <= 1


def test_the_exchange_uses_the_push_based_sort_shuffle_when_asked_or_for_many_blocks():
    from ray.data.context import ShuffleStrategy

    push, pull = ShuffleStrategy.SORT_SHUFFLE_PUSH_BASED, ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    assert exchange_strategy(push, 1) == push
    assert exchange_strategy(ShuffleStrategy.HASH_SHUFFLE, PUSH_BASED_MIN_BLOCKS) == push
    for other in ShuffleStrategy:
        if other != push:
            assert exchange_strategy(other, PUSH_BASED_MIN_BLOCKS - 1) == pull


def test_input_blocks_estimate_the_reads_output_in_blocks():
    mib = 1 << 20
    plain = [Source(i, f"f{i}.jsonl", "jsonl", 100 * mib) for i in range(3)]
    assert input_blocks(plain, 128 * mib) == 3  # 300 MiB in 128 MiB blocks, rounded up
    assert input_blocks(plain, None) == 3  # Ray's default block size
    gzipped = [Source(0, "f.jsonl.gz", "jsonl", 100 * mib)]
    assert input_blocks(gzipped, 128 * mib) == 4  # ~500 MiB once decompressed


def test_context_settings_hold_for_the_block_and_restore_the_callers_even_on_error():
    from types import SimpleNamespace

    from twinkle_agentic.jobs.preprocess.job import context_settings

    context = SimpleNamespace(enable_progress_bars=True, shuffle_strategy="hash")
    with context_settings(context, enable_progress_bars=False, shuffle_strategy="sort"):
        assert (context.enable_progress_bars, context.shuffle_strategy) == (False, "sort")
    assert (context.enable_progress_bars, context.shuffle_strategy) == (True, "hash")
    with pytest.raises(RuntimeError), context_settings(context, shuffle_strategy="sort"):
        raise RuntimeError("a failed run")
    assert context.shuffle_strategy == "hash"
