"""Datasources (readers) and datasinks (writers) over any `pyarrow.fs` filesystem."""
