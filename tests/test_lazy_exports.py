import sys

import pytest

from twinkle_agentic.lazy import lazy_exports

PACKAGE = """
from twinkle_agentic.lazy import lazy_exports

_EXPORTS = {"Thing": ".things", "helper": ".things"}
__getattr__ = lazy_exports(__name__, _EXPORTS)
"""
THINGS = """
import sys

sys.modules[__package__].loads = getattr(sys.modules[__package__], "loads", 0) + 1


class Thing:
    pass


def helper():
    return "helped"
"""


@pytest.fixture
def lazy_package(tmp_path, monkeypatch):
    package = tmp_path / "lazy_pkg_under_test"
    package.mkdir()
    (package / "__init__.py").write_text(PACKAGE)
    (package / "things.py").write_text(THINGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "lazy_pkg_under_test"
    for name in [n for n in sys.modules if n.split(".")[0] == "lazy_pkg_under_test"]:
        del sys.modules[name]


def test_a_name_loads_its_submodule_on_first_use_only(lazy_package):
    import importlib

    pkg = importlib.import_module(lazy_package)
    assert f"{lazy_package}.things" not in sys.modules
    from lazy_pkg_under_test import Thing  # the import under test

    assert f"{lazy_package}.things" in sys.modules
    assert Thing.__module__ == f"{lazy_package}.things"
    # kept in the package's namespace: later reads never reach __getattr__ again
    assert vars(pkg)["Thing"] is Thing
    assert pkg.helper() == "helped" and vars(pkg)["helper"] is pkg.helper
    assert pkg.loads == 1


def test_an_unknown_name_is_an_attribute_error_naming_the_package(lazy_package):
    import importlib

    pkg = importlib.import_module(lazy_package)
    with pytest.raises(AttributeError, match=r"module 'lazy_pkg_under_test' has no attribute 'Missing'"):
        pkg.Missing  # noqa: B018
    assert not hasattr(pkg, "Missing")
    with pytest.raises(ImportError, match="Missing"):
        from lazy_pkg_under_test import Missing  # noqa: F401


def test_a_name_whose_submodule_lacks_it_fails_loudly():
    getattr_ = lazy_exports("twinkle_agentic", {"Nowhere": ".lazy"})
    with pytest.raises(AttributeError, match="Nowhere"):
        getattr_("Nowhere")
