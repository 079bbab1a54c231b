"""The public facade: exactly these names, and each one resolves."""
from __future__ import annotations

import types

import ember

EXPECTED = {
    "ObjectRef", "available_resources", "cancel", "cluster_resources", "exceptions", "get",
    "get_gpu_ids", "get_runtime_context", "init", "is_initialized", "nodes", "put", "remote",
    "shutdown", "wait", "__version__",
}


def test_all_is_exactly_the_expected_set():
    assert len(ember.__all__) == len(set(ember.__all__)), "duplicate names in ember.__all__"
    assert set(ember.__all__) == EXPECTED


def test_every_exported_name_resolves():
    for name in ember.__all__:
        assert hasattr(ember, name), name
        assert getattr(ember, name) is not None, name


def test_star_import_gives_the_exported_names():
    ns: dict = {}
    exec("from ember import *", ns)
    assert EXPECTED <= set(ns)


def test_kinds_of_exported_members():
    assert isinstance(ember.exceptions, types.ModuleType)
    assert ember.exceptions.__name__ == "ember.exceptions"
    assert isinstance(ember.ObjectRef, type)
    assert isinstance(ember.__version__, str) and ember.__version__
    for name in EXPECTED - {"exceptions", "ObjectRef", "__version__"}:
        assert callable(getattr(ember, name)), name
