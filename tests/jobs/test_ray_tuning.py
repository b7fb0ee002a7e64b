"""The job's Ray Data start-up settings: present in the installed Ray, applied only for the run."""

from __future__ import annotations

import pytest

from jobs.preprocess import ray_tuning


def _current() -> dict[str, object]:
    from ray.data._internal.execution.operators.hash_shuffle import HashShufflingOperatorBase
    from ray.data._internal.execution.resource_manager import ResourceManager

    return {
        "refresh": ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S,
        "min": HashShufflingOperatorBase._MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES,
        "max": HashShufflingOperatorBase._MEMORY_ESTIMATION_SAMPLE_MAX_BUNDLES,
    }


@pytest.fixture
def no_sample_env(monkeypatch):
    for name in ray_tuning.SAMPLE_ENV:
        monkeypatch.delenv(name, raising=False)


def test_every_setting_exists_in_the_installed_ray(no_sample_env):
    names = [name for _, name, _ in ray_tuning.short_run_overrides()]
    # a Ray upgrade that renames one of them must fail here, not silently bring the waits back
    assert names == [
        "GLOBAL_LIMITS_UPDATE_INTERVAL_S",
        "_MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES",
        "_MEMORY_ESTIMATION_SAMPLE_MAX_BUNDLES",
    ]


def test_applied_inside_the_run_and_restored_after_it_even_on_error(no_sample_env):
    before = _current()
    assert before != {"refresh": ray_tuning.LIMITS_REFRESH_S, "min": 1, "max": 1}
    with pytest.raises(RuntimeError, match="boom"), ray_tuning.short_run_scheduling():
        assert _current() == {
            "refresh": ray_tuning.LIMITS_REFRESH_S,
            "min": ray_tuning.SHUFFLE_SAMPLE_BUNDLES,
            "max": ray_tuning.SHUFFLE_SAMPLE_BUNDLES,
        }
        raise RuntimeError("boom")
    assert _current() == before


def test_an_explicit_sample_setting_in_the_environment_wins(monkeypatch):
    monkeypatch.setenv("RAY_DATA_MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES", "4")
    before = _current()
    with ray_tuning.short_run_scheduling():
        now = _current()
    assert now["refresh"] == ray_tuning.LIMITS_REFRESH_S
    assert (now["min"], now["max"]) == (before["min"], before["max"])
    assert _current() == before
