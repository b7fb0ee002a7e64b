"""``twinkle_agentic.metrics``: checked calls without Ray, and both jobs' metrics on a real local Ray
cluster's metrics endpoint (Prometheus text), scraped until the periodic export shows them.

Counters are cumulative over the test session's cluster, and a process exports what it recorded a few
seconds later, so earlier tests' counts can still arrive while this one runs. The integration test
therefore compares exactly only what nothing else records: the driver's (the farm's) counts, against
a baseline taken once a marker the driver set has been exported, and the counts of a step of its own,
tagged with a reason unique to the run. The shared preprocess series must have grown at least as
much as stats.json says.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
import uuid
from collections import Counter, defaultdict

import pytest
import yaml
from twinkle_agentic.actors.activity import Activity, ToolCallTiming

from twinkle_agentic import metrics
from twinkle_agentic.preprocessor.base import Filter

# -- without Ray ----------------------------------------------------------------------------------------


def test_recording_without_ray_is_a_no_op_that_still_checks_names_and_tags(monkeypatch):
    monkeypatch.setattr(metrics, "ray_running", lambda: False)
    metrics.record("twinkle_preprocess_rows_dropped_total", 3, step="HardFilter", reason="too_short")
    metrics.record_batch([{"stop_reason": "stop"}], Activity(1.0, 0.5, 0.25), 4, source="worker")
    assert metrics._made == {} or all(name in metrics.METRICS for name in metrics._made)
    with pytest.raises(KeyError, match="unknown metric 'twinkle_nope'"):
        metrics.record("twinkle_nope", 1)
    with pytest.raises(ValueError, match=r"takes tags \['reason', 'step'\], got \['step'\]"):
        metrics.record("twinkle_preprocess_rows_dropped_total", 1, step="x")


def test_ray_running_never_imports_ray(monkeypatch):
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert metrics.ray_running() is False
    assert "ray" not in sys.modules


def test_every_metric_is_named_for_the_project_and_documented():
    from tests.support.paths import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "metrics.md").read_text()
    for name, metric in metrics.METRICS.items():
        assert name.startswith("twinkle_") and metric.kind in (metrics.COUNTER, metrics.GAUGE, metrics.HISTOGRAM)
        assert f"`{name}`" in doc, f"docs/metrics.md does not describe {name}"
        assert (metric.kind == metrics.HISTOGRAM) == bool(metric.bounds)


class FakeMetric:
    def __init__(self, *args, **kwargs):
        self.calls: list[tuple[float, dict]] = []

    def inc(self, value, tags=None):
        self.calls.append((value, tags))

    set = observe = inc


def test_a_batch_is_recorded_by_stop_reason_tool_and_state(monkeypatch):
    made: dict[str, FakeMetric] = defaultdict(FakeMetric)
    monkeypatch.setattr(metrics, "ray_running", lambda: True)
    monkeypatch.setattr(metrics, "_ray_metric", lambda metric: made[metric.name])
    activity = Activity(2.0, 1.25, 0.5, [ToolCallTiming("calculator", 0.02, True), ToolCallTiming("search", 1.5, False)])
    metrics.record_batch(
        [{"stop_reason": "stop"}, {"stop_reason": "error"}, {"stop_reason": "stop"}], activity, 7, source="worker"
    )
    metrics.record_batch([{"stop_reason": "error"}], Activity(), 0, source="farm")
    prefix = "twinkle_rollout_"
    assert made[prefix + "trajectories_finished_total"].calls == [
        (2, {"stop_reason": "stop"}), (1, {"stop_reason": "error"}), (1, {"stop_reason": "error"})
    ]
    assert made[prefix + "trajectories_failed_total"].calls == [(1, {"source": "worker"}), (1, {"source": "farm"})]
    assert made[prefix + "generated_tokens_total"].calls == [(7, {})]  # the farm's 0 adds nothing
    assert made[prefix + "tool_latency_seconds"].calls == [
        (0.02, {"tool": "calculator", "ok": "true"}), (1.5, {"tool": "search", "ok": "false"})
    ]
    assert made[prefix + "worker_seconds_total"].calls == [
        (1.25, {"state": "engine_busy"}), (0.5, {"state": "tool_wait"}), (0.25, {"state": "other"})
    ]


# -- on a local Ray cluster -----------------------------------------------------------------------------

SERIES = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Tags Ray adds to every series; the sums below are over them.
RAY_TAGS = {"Component", "NodeAddress", "SessionName", "Version", "WorkerId", "JobId"}


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """The endpoint's ``twinkle_`` series, summed over Ray's own tags: (name without ``ray_``, tags) -> value."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out: dict[tuple[str, frozenset], float] = defaultdict(float)
    for line in text.splitlines():
        match = SERIES.match(line)
        if not match or not match["name"].startswith("ray_twinkle_"):
            continue
        labels = {
            k: v for k, v in LABEL.findall(match["labels"] or "") if k not in RAY_TAGS and not k.startswith("otel_")
        }
        out[(match["name"].removeprefix("ray_"), frozenset(labels.items()))] += float(match["value"])
    return out


def metrics_url() -> str:
    import ray

    node = next(n for n in ray.nodes() if n["Alive"])
    return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"


def bucket(value: float, bounds: tuple[float, ...]) -> tuple[float, float]:
    """The histogram bucket ``value`` falls in: (its lower, its upper bound)."""
    edges = (0.0, *bounds, float("inf"))
    return next((low, high) for low, high in zip(edges, edges[1:], strict=False) if value <= high)


class MetricsProbe(Filter):
    """Drops rows with an odd ``id`` under the reason it is given (a step only this test runs)."""

    def __init__(self, reason: str):
        self.drop_as = reason

    def reason(self, row: dict) -> str | None:
        return self.drop_as if isinstance(row.get("id"), int) and row["id"] % 2 else None


def exported_baseline(url: str) -> dict:
    """A scrape taken once everything this process recorded before has been exported: the driver
    exports all its metrics together, so a gauge set to a fresh value marks the point."""
    marker = -float(uuid.uuid4().int % 1_000_000 + 1)
    metrics.record("twinkle_rollout_policy_version", marker)
    deadline = time.monotonic() + 45
    while True:
        seen = scrape(url)
        if seen.get(key("twinkle_rollout_policy_version")) == marker:
            return seen
        assert time.monotonic() < deadline, "the driver's metrics were not exported within 45 s"
        time.sleep(0.5)


def key(name: str, **tags: str) -> tuple[str, frozenset]:
    return name, frozenset(tags.items())


@pytest.mark.integration
def test_both_jobs_metrics_reach_the_ray_metrics_endpoint(ray_local, chat_inputs, tiny_model_path, tmp_path):
    from safetensors.torch import load_file
    from twinkle_agentic.actors import EngineConfig, FarmOptions, RolloutFarm, RolloutSpec, ToolCatalog
    from twinkle_agentic.jobs.preprocess import main

    from tests.actors.test_worker_and_driver import CALC, trajectories
    from twinkle_agentic.demo.tools import demo_tools

    url = metrics_url()
    before = exported_baseline(url)
    probe = f"probe_{uuid.uuid4().hex[:8]}"

    # the preprocess job, through its CLI
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(
        {"steps": ["HardFilter", {"tests.test_metrics:MetricsProbe": {"reason": probe}}, "DedupFilter"]}
    ))
    out = tmp_path / "out"
    assert main(["--input", str(chat_inputs / "*.jsonl*"), "--output", str(out), "--config", str(config), "--no-progress"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    at_least = {key("twinkle_preprocess_rows_read_total"): stats["rows_read"]}
    for step in stats["steps"]:
        at_least[key("twinkle_preprocess_rows_kept_total", step=step["step"])] = step["after"]
        for reason, n in step["reasons"].items():
            at_least[key("twinkle_preprocess_rows_dropped_total", step=step["step"], reason=reason)] = n
    (probed,) = [s for s in stats["steps"] if s["step"] == "MetricsProbe"]
    assert probed["reasons"][probe] > 0 and probed["after"] > 0 and len(at_least) >= 6
    expected = {
        key("twinkle_preprocess_rows_kept_total", step="MetricsProbe"): probed["after"],
        key("twinkle_preprocess_rows_dropped_total", step="MetricsProbe", reason=probe): probed["reasons"][probe],
    }

    # the farm: a worker's own failure (t1), a tool call (t2), a worker death that gives up t4 and t5
    farm = RolloutFarm(
        EngineConfig(tiny_model_path, mode="tests.support.farm_fakes:ScriptedMode", num_cpus=0.1),
        RolloutSpec(catalog=ToolCatalog({"demo": demo_tools()})),
        FarmOptions(engines=1, batch_size=2, inflight_per_worker=1, max_batch_attempts=1, max_worker_restarts=2),
    )
    try:
        batches = list(farm.run(trajectories(6, t1={"explode": True}, t2={"call": CALC}, t4={"crash": True})))
        assert farm.update_weights(load_file(f"{tiny_model_path}/model.safetensors"), version=3) == 3
    finally:
        farm.shutdown()
    results = [t for b in batches for t in b.trajectories]
    reasons = Counter(t["stop_reason"] for t in results)
    assert reasons == {"stop": 3, "error": 3} and farm.restarts == 1
    activity = sum((b.activity for b in batches), Activity())
    assert [c.tool for c in activity.tool_calls] == ["calculator"]
    prefix = "twinkle_rollout_"
    expected.update({
        key(prefix + "trajectories_started_total"): 6,
        key(prefix + "trajectories_finished_total", stop_reason="stop"): 3,
        key(prefix + "trajectories_finished_total", stop_reason="error"): 3,
        key(prefix + "trajectories_failed_total", source="worker"): 1,
        key(prefix + "trajectories_failed_total", source="farm"): 2,
        key(prefix + "generated_tokens_total"): sum(b.generated_tokens for b in batches),
        key(prefix + "worker_restarts_total"): 1,
        key(prefix + "tool_latency_seconds_count", tool="calculator", ok="true"): 1,
        key(prefix + "weight_update_seconds_count", path="payload"): 1,
    })
    # Ray's exporter sums a histogram's observations at their buckets' midpoints: compare buckets
    seconds = {
        key(prefix + "worker_seconds_total", state="engine_busy"): (activity.engine_busy_s,) * 2,
        key(prefix + "tool_latency_seconds_sum", tool="calculator", ok="true"): bucket(
            activity.tool_calls[0].latency_s, metrics.TOOL_LATENCY_BOUNDS
        ),
        key(prefix + "weight_update_seconds_sum", path="payload"): bucket(
            farm.last_update.wall_s, metrics.UPDATE_LATENCY_BOUNDS
        ),
    }

    def changes() -> dict:
        now = scrape(url)
        return {k: now.get(k, 0.0) - before.get(k, 0.0) for k in (*at_least, *expected, *seconds)} | {
            "version": now.get(key(prefix + "policy_version"))
        }

    deadline = time.monotonic() + 45  # Ray exports every few seconds
    seen = changes()
    wanted = {**at_least, **expected}
    while any(seen[k] < v for k, v in wanted.items()) or seen["version"] != 3:
        assert time.monotonic() < deadline, f"metrics not exported in time: {seen} (expected {expected})"
        time.sleep(1)
        seen = changes()
    assert {k: seen[k] for k in expected} == expected
    assert all(seen[k] >= v for k, v in at_least.items())
    for k, (low, high) in seconds.items():
        assert low * (1 - 1e-6) <= seen[k] <= high * (1 + 1e-6), (k, seen[k], low, high)
