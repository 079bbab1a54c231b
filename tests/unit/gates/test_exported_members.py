"""The public facade: exactly these names, and each one resolves."""
from __future__ import annotations

import types

import ember

EXPECTED = {
    "LoggingConfig", "ObjectRef", "ObjectRefGenerator", "actor", "available_resources", "cancel", "cluster_resources", "exceptions",
    "get", "get_actor", "get_gpu_ids", "get_runtime_context", "init", "is_initialized", "kill",
    "method", "nodes", "put", "remote", "shutdown", "util", "wait", "__version__",
}
MODULES = {"exceptions", "actor", "util"}


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
    for name in MODULES:
        assert isinstance(getattr(ember, name), types.ModuleType)
        assert getattr(ember, name).__name__ == f"ember.{name}"
    assert isinstance(ember.ObjectRef, type)
    assert isinstance(ember.LoggingConfig, type)
    assert isinstance(ember.__version__, str) and ember.__version__
    for name in EXPECTED - MODULES - {"ObjectRef", "__version__"}:
        assert callable(getattr(ember, name)), name
