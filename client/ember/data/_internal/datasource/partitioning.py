"""Partition values from file paths (Ray's `Partitioning`): hive (`year=2024/lang=zh/f.parquet`)
and directory style (`dog/x.png` with field_names=["label"]).

The directories are taken relative to `base_dir`, or to the directory the read named when
`base_dir` is not given. Values are strings, or `field_types`' int/float/str for named fields.
"""
from __future__ import annotations

import urllib.parse
from typing import Any

STYLES = ("hive", "dir")
TYPES = (int, float, str)


class Partitioning:
    """How partition values are encoded in paths (Ray's ray.data.datasource.Partitioning)."""

    def __init__(self, style: str = "hive", base_dir: str | None = None,
                 field_names: list[str] | None = None,
                 field_types: dict[str, type] | None = None, filesystem: Any = None) -> None:
        if style not in STYLES:
            raise ValueError(f"Partitioning: style must be one of {list(STYLES)}, got {style!r}")
        if filesystem is not None:
            raise ValueError("Partitioning: ember.data does not support 'filesystem' (the read's "
                             "filesystem is used)")
        if style == "dir" and not field_names:
            raise ValueError("Partitioning: directory partitioning needs field_names, one per "
                             "directory level")
        for k, t in (field_types or {}).items():
            if t not in TYPES:
                raise ValueError(f"Partitioning: field_types[{k!r}] must be int, float or str, "
                                 f"got {t!r}")
        self.style = style
        self.base_dir = base_dir.rstrip("/") if base_dir else None
        self.field_names = list(field_names) if field_names else None
        self.field_types = dict(field_types or {})

    def __repr__(self) -> str:
        return (f"Partitioning(style={self.style!r}, base_dir={self.base_dir!r}, "
                f"field_names={self.field_names!r})")

    def parse(self, path: str, read_base: str) -> dict[str, Any]:
        """The partition values of the file at `path` (read from under `read_base`)."""
        base = self.base_dir or read_base
        if "://" in base:
            base = urllib.parse.urlparse(base).netloc + urllib.parse.urlparse(base).path
        rel = path[len(base):].lstrip("/") if path.startswith(base) else path
        dirs = [d for d in rel.split("/")[:-1] if d]
        if self.style == "hive":
            out = {}
            for d in dirs:
                if "=" in d:
                    k, v = d.split("=", 1)
                    out[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
            if self.field_names is not None and list(out) != self.field_names:
                raise ValueError(f"{path}: hive partition keys {list(out)} do not match "
                                 f"field_names {self.field_names}")
        else:
            names = self.field_names or []
            if len(dirs) != len(names):
                raise ValueError(f"{path}: {len(dirs)} directories under {base} where "
                                 f"field_names {names} name {len(names)}")
            out = dict(zip(names, dirs, strict=True))
        return {k: self._cast(k, v, path) for k, v in out.items()}

    def _cast(self, key: str, value: str, path: str) -> Any:
        t = self.field_types.get(key, str)
        try:
            return t(value)
        except ValueError:
            raise ValueError(f"{path}: partition value {value!r} of {key!r} is not "
                             f"{t.__name__}") from None


HIVE = Partitioning("hive")


def parse(spec: Any, path: str, base: str) -> dict[str, Any]:
    """Partition values by `spec`: False (none), True (hive) or a Partitioning."""
    if not spec:
        return {}
    return (spec if isinstance(spec, Partitioning) else HIVE).parse(path, base)
