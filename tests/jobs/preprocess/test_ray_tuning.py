"""The job's Ray Data start-up setting: present in the installed Ray, applied only for the run, and
fast only until the executor knows the cluster's resources."""

from __future__ import annotations

import inspect

import pytest
from twinkle_agentic.jobs.preprocess import ray_tuning


def _manager_class():
    from ray.data._internal.execution.resource_manager import ResourceManager

    return ResourceManager


def _manager_with_limits(limits):
    manager = object.__new__(_manager_class())  # attribute lookup only: no topology needed
    manager._global_limits = limits
    return manager


def _interval(manager) -> float:
    return manager.GLOBAL_LIMITS_UPDATE_INTERVAL_S


def test_the_setting_exists_in_the_installed_ray():
    names = [name for _, name, _ in ray_tuning.short_run_overrides()]
    # a Ray upgrade that renames it must fail here, not silently bring the wait back
    assert names == ["GLOBAL_LIMITS_UPDATE_INTERVAL_S"]
    # the refresh reads the manager's current limits under this name
    assert "self._global_limits = " in inspect.getsource(_manager_class())


def test_fast_until_the_limits_are_known_then_rays_own_interval():
    from ray.data._internal.execution.interfaces.execution_options import ExecutionResources

    ray_default = _interval(_manager_class())
    assert ray_default != ray_tuning.LIMITS_REFRESH_S
    waiting = _manager_with_limits(ExecutionResources.zero())
    known = _manager_with_limits(ExecutionResources(cpu=2, object_store_memory=2**30))
    with ray_tuning.short_run_scheduling():
        assert _interval(waiting) == ray_tuning.LIMITS_REFRESH_S
        assert _interval(known) == ray_default
        assert _interval(_manager_class()) == ray_tuning.LIMITS_REFRESH_S
    assert _interval(waiting) == ray_default


def test_restored_after_the_run_even_on_error():
    before = vars(_manager_class())["GLOBAL_LIMITS_UPDATE_INTERVAL_S"]
    with pytest.raises(RuntimeError, match="boom"), ray_tuning.short_run_scheduling():
        assert vars(_manager_class())["GLOBAL_LIMITS_UPDATE_INTERVAL_S"] is not before
        raise RuntimeError("boom")
    assert vars(_manager_class())["GLOBAL_LIMITS_UPDATE_INTERVAL_S"] is before
