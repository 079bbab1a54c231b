"""Ember's implementation modules. Nothing here is public API; see `ember/__init__.py`."""
