"""The job's Ray Data start-up settings: present in the installed Ray, applied only for the run."""

from __future__ import annotations

import pytest

from jobs.preprocess import ray_tuning


def _current() -> dict[str, object]:
    from ray.data._internal.execution.operators.hash_shuffle import HashShufflingOperatorBase
    from ray.data._internal.execution.resource_manager import ResourceManager

    start = HashShufflingOperatorBase.start
    return {
        "refresh": ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S,
        "early_start": hasattr(start, "wrapped"),
        "start": getattr(start, "wrapped", start),
    }


@pytest.fixture
def no_sample_env(monkeypatch):
    for name in ray_tuning.SAMPLE_ENV:
        monkeypatch.delenv(name, raising=False)


def test_every_setting_exists_in_the_installed_ray(no_sample_env):
    names = [name for _, name, _ in ray_tuning.short_run_overrides()]
    # a Ray upgrade that renames one of them must fail here, not silently bring the waits back
    assert names == ["GLOBAL_LIMITS_UPDATE_INTERVAL_S", "start"]


def test_applied_inside_the_run_and_restored_after_it_even_on_error(no_sample_env):
    before = _current()
    assert before["refresh"] != ray_tuning.LIMITS_REFRESH_S and not before["early_start"]
    with pytest.raises(RuntimeError, match="boom"), ray_tuning.short_run_scheduling():
        assert _current() == {"refresh": ray_tuning.LIMITS_REFRESH_S, "early_start": True, "start": before["start"]}
        raise RuntimeError("boom")
    assert _current() == before


def test_an_explicit_sample_setting_in_the_environment_keeps_rays_sampling(monkeypatch):
    monkeypatch.setenv("RAY_DATA_MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES", "4")
    before = _current()
    with ray_tuning.short_run_scheduling():
        now = _current()
    assert now == {**before, "refresh": ray_tuning.LIMITS_REFRESH_S}
    assert _current() == before


class FakeShuffle:
    """The three members of a hash shuffle operator the early start touches."""

    def __init__(self, started: bool | None):
        if started is not None:
            self._shuffle_started = started
        self.calls: list[tuple] = []

    def start(self, options, block_ref_counter):
        self.calls.append(("start", options, block_ref_counter))

    def _extrapolate_dataset_bytes(self):
        return 12345

    def _start_shuffle(self, *, estimated_dataset_bytes):
        self.calls.append(("shuffle", estimated_dataset_bytes))


@pytest.mark.parametrize(
    ("started", "expected"),
    [
        (False, [("start", "opts", "refs"), ("shuffle", 12345)]),  # sized from the planning estimate
        (True, [("start", "opts", "refs")]),  # already started (Ray did it): once is enough
        (None, [("start", "opts", "refs")]),  # an operator that does not say: left to Ray
    ],
)
def test_the_early_start_starts_the_shuffle_after_the_operator_once(started, expected):
    shuffle = FakeShuffle(started)
    ray_tuning.start_shuffle_at_once(FakeShuffle.start)(shuffle, "opts", "refs")
    assert shuffle.calls == expected
