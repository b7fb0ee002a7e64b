"""Embedded cluster sizing: every core of the machine, and at least the logical CPUs a job reserves."""

from __future__ import annotations

import importlib

import pytest

connect_module = importlib.import_module("twinkle_agentic.cluster.connect")  # the package re-exports connect()


@pytest.mark.parametrize("cores, min_cpus, cpus", [(2, 0, 2), (2, 3, 3), (8, 3, 8), (None, 0, 1)])
def test_local_cluster_size_is_the_machine_or_the_jobs_need(monkeypatch, cores, min_cpus, cpus):
    monkeypatch.setattr(connect_module.os, "cpu_count", lambda: cores)
    assert connect_module.local_cluster_size(min_cpus) == {"num_cpus": cpus}
