"""The preprocess bench's per-process counters (pure logic, no cluster): CPU, kernel CPU and minor
page faults summed by kind of process since a snapshot; the reports' CPU kept apart from the driver's."""

from __future__ import annotations

import mmap
import os

from bench.preprocess_job import ClusterSampler, reports_timed


def test_counters_are_summed_by_kind_since_the_snapshot():
    sampler = ClusterSampler()
    sampler.kind_by_pid = {1: "workers", 2: "workers", 3: "ray_data_actors"}
    sampler.cpu_by_pid = {1: 2.0, 2: 3.0, 3: 1.0}
    sampler.kernel_by_pid = {1: 0.5, 2: 0.25, 3: 0.1}
    sampler.faults_by_pid = {1: 1000.0, 2: 500.0, 3: 10.0}
    since = sampler.snapshot()
    sampler.cpu_by_pid = {1: 4.0, 2: 3.5, 3: 1.0, 4: 0.3}  # pid 4 started after the snapshot
    sampler.kernel_by_pid = {1: 1.0, 2: 0.5, 3: 0.1, 4: 0.05}
    sampler.faults_by_pid = {1: 5000.0, 2: 700.0, 3: 10.0, 4: 40.0}

    assert sampler.by_kind("cpu", since) == {"other": 0.3, "ray_data_actors": 0.0, "workers": 2.5}
    assert sampler.by_kind("kernel", since) == {"other": 0.05, "ray_data_actors": 0.0, "workers": 0.75}
    assert sampler.by_kind("faults", since) == {"other": 40.0, "ray_data_actors": 0.0, "workers": 4200.0}


def test_minor_faults_read_from_proc_and_none_for_a_missing_process():
    mine = ClusterSampler._minor_faults(os.getpid())
    assert mine is not None and mine > 0
    block = mmap.mmap(-1, 32 << 20)  # fresh anonymous pages: a heap block may reuse resident ones
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1  # touching each faults it in
    block.close()
    assert ClusterSampler._minor_faults(os.getpid()) > mine
    assert ClusterSampler._minor_faults(2**22 + 12345) is None


def test_the_reports_cpu_is_timed_apart_and_the_job_module_restored(tmp_path):
    """The driver's CPU for the reports written after the timed data work is kept out of the job's."""
    from collections import Counter

    import pyarrow.fs
    from twinkle_agentic.jobs.preprocess import job
    from twinkle_agentic.jobs.preprocess.report import RunSummary

    from twinkle_agentic.preprocessor.stats import StepStats

    summary = RunSummary(str(tmp_path), 3, 2, 1, 1.0, [StepStats("read", 3, 2, 1, 0.0, Counter(malformed_json=1))])
    original, cpu = job.write_reports, []
    with reports_timed(cpu):
        assert job.write_reports is not original
        written = job.write_reports(summary, pyarrow.fs.LocalFileSystem(), str(tmp_path))
    assert job.write_reports is original
    assert sorted(p.rsplit("/", 1)[1] for p in written) == ["drop_reasons.png", "report.md", "stats.json"]
    assert len(cpu) == 1 and cpu[0] > 0  # drawing a PNG takes CPU
