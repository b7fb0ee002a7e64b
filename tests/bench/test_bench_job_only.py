"""The preprocess bench's ``--job-only`` mode (the job alone, for corpora one process cannot hold),
its object-store figures (capacity, what was spilled and restored) and its count of the worker
processes a run started."""

from __future__ import annotations

import argparse

import bench.preprocess_job as bench


def test_object_store_figures_count_what_ray_spilled(ray_local):
    import numpy as np
    import ray

    before = bench.object_store_mib()
    assert before["capacity"] > 0 and before["spilled"] >= 0 and before["restored"] >= 0
    # more than the store holds, all referenced at once: Ray must spill some of it to disk
    chunk = int(before["capacity"] * 2**20) // 4
    refs = [ray.put(np.ones(chunk, dtype=np.uint8)) for _ in range(6)]
    after = bench.object_store_mib()
    assert after["spilled"] - before["spilled"] >= chunk / 2**20
    assert sum(int(ray.get(ref)[-1]) for ref in refs) == 6  # every object still readable, spilled or not
    assert bench.object_store_mib()["restored"] > after["restored"]


def test_worker_processes_started_counts_the_raylets_starts(ray_local):
    import time

    import ray

    @ray.remote(num_cpus=0)
    class Fresh:  # every actor holds a worker process of its own while it lives
        def pid(self) -> int:
            import os

            return os.getpid()

    before = bench.worker_processes_started()
    actors = [Fresh.remote() for _ in range(8)]
    assert len(set(ray.get([a.pid.remote() for a in actors]))) == 8
    # at most the test cluster's soft limit (its 4 CPUs) of idle workers could be reused
    deadline = time.monotonic() + 10
    while bench.worker_processes_started() < before + 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # the raylet writes its log as it goes
    for actor in actors:
        ray.kill(actor)
    assert bench.worker_processes_started() >= before + 4


def test_job_only_runs_no_reference_and_reports_no_efficiency(tmp_path, monkeypatch, capsys):
    children = []

    def child(args: list) -> object:
        children.append(args[0])
        job = {
            "rows": 1000, "kept": 900, "seconds": 2.0, "cpu_s": 3.5, "cpu_s_by_process": {"workers": 3.0},
            "kernel_cpu_s_by_process": {}, "minor_faults_by_process": {}, "driver_peak_mb": 250.0,
            "workers_peak_total_mb": 900.0, "workers_peak_single_mb": 500.0, "workers_peak_pss_mb": 800.0,
            "object_store_mib": {"capacity": 7000, "spilled": 1500.0, "restored": 1400.0}, "input_digests": True,
        }  # fmt: skip
        return [job, dict(job, seconds=1.0)]

    monkeypatch.setattr(bench, "_child", child)
    monkeypatch.setattr(bench, "make_corpus", lambda work, rows, seed: tmp_path)
    args = argparse.Namespace(
        work=tmp_path, seed=0, config=None, cpus=[2], batch_size=None, job_runs=2, timeline=False,
        pair=True, job_only=True, digests_ab=False,
    )  # fmt: skip
    results = bench.measure_size(args, 1000, 1)

    assert children == ["job"]  # no one-process reference, pair or DedupFilter run
    assert [r["rows_per_s"] for r in results] == [500.0, 1000.0]
    assert all("efficiency" not in r for r in results)
    out = capsys.readouterr().out
    assert "spilled 1,500 MiB, restored 1,400 MiB" in out
    assert bench.median_efficiencies(results + results) == []  # nothing to take a median of
