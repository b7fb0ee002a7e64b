"""@remote_class on a real local Ray cluster (no mocks)."""

import pytest

from twinkle_agentic.remote import ActorLauncher, remote_class


@remote_class()
class Counter:
    def __init__(self, start: int = 0):
        self.value = start

    def __call__(self, x: int) -> int:
        self.value += x
        return self.value

    def where(self) -> str:
        import os

        return str(os.getpid())


@remote_class(num_cpus=0)
class Light:
    def __call__(self, xs):
        return [x * 2 for x in xs]


def test_local_construction_needs_no_ray():
    c = Counter(5)
    assert c(2) == 7 and type(c) is Counter
    assert isinstance(Counter.remote, ActorLauncher)
    with pytest.raises(AttributeError, match="class attribute"):
        c.remote  # noqa: B018


def test_remote_actor_call_and_state(ray_local):
    import os

    handle = Counter.remote(start=10)
    assert ray_local.get(handle.__call__.remote(1)) == 11
    assert ray_local.get(handle.__call__.remote(2)) == 13  # state lives in the actor
    assert ray_local.get(handle.where.remote()) != str(os.getpid())


def test_options_name_and_resources(ray_local):
    handle = Counter.options(name="twinkle-counter-test", num_cpus=0).remote(start=1)
    same = ray_local.get_actor("twinkle-counter-test")
    assert ray_local.get(same.__call__.remote(1)) == 2
    ray_local.kill(handle)


def test_decorator_defaults_and_plain_results(ray_local):
    handle = Light.remote()
    assert ray_local.get(handle.__call__.remote([1, 2])) == [2, 4]


def test_unknown_option_is_rejected():
    with pytest.raises(TypeError, match="unknown actor option"):
        Counter.options(gpus=1)
    with pytest.raises(TypeError, match="unknown actor option"):
        remote_class(cpus=1)
