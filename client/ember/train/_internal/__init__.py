"""Internals shared by Train and Tune: the per-process session and storage helpers."""
