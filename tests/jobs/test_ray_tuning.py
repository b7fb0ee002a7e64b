"""The job's Ray Data start-up setting: present in the installed Ray, applied only for the run."""

from __future__ import annotations

import pytest

from jobs.preprocess import ray_tuning


def _refresh() -> float:
    from ray.data._internal.execution.resource_manager import ResourceManager

    return ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S


def test_the_setting_exists_in_the_installed_ray():
    names = [name for _, name, _ in ray_tuning.short_run_overrides()]
    # a Ray upgrade that renames it must fail here, not silently bring the wait back
    assert names == ["GLOBAL_LIMITS_UPDATE_INTERVAL_S"]


def test_applied_inside_the_run_and_restored_after_it_even_on_error():
    before = _refresh()
    assert before != ray_tuning.LIMITS_REFRESH_S
    with pytest.raises(RuntimeError, match="boom"), ray_tuning.short_run_scheduling():
        assert _refresh() == ray_tuning.LIMITS_REFRESH_S
        raise RuntimeError("boom")
    assert _refresh() == before
