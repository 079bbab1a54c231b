"""The logical plan and the optimizer (pure: no cluster, no I/O).

A Dataset holds a tree of logical operators. Executing it runs `optimize` (projection and filter
pushdown into reads) and `to_physical` (operator fusion): consecutive map-like operators that run
as tasks with the same resources become one physical operator, so a row goes through
read → map → filter → write inside one task without returning to the object store in between.
Operators on actor pools, all-to-all operators, limit, union and zip stay separate.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from .compute import ActorPoolStrategy, TaskPoolStrategy
from .transforms import FilterExpr, Project, Step

if TYPE_CHECKING:
    from .operators import RefBundle

# --- logical operators ---------------------------------------------------------------------

@dataclasses.dataclass(eq=False)
class LogicalOp:
    """A node of the logical plan."""

    name: str
    inputs: list[LogicalOp]


@dataclasses.dataclass(eq=False)
class Read(LogicalOp):
    """Reads a datasource; `columns` and `filter` are pushed down into the reader."""

    datasource: Any = None
    parallelism: int = -1
    remote_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    concurrency: int | None = None
    columns: list[str] | None = None
    filter: Any = None


@dataclasses.dataclass(eq=False)
class InputData(LogicalOp):
    """Blocks already in the object store: a list of (ref, BlockMetadata)."""

    bundles: list[RefBundle] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class MapOp(LogicalOp):
    """A one-to-one-block operator (map, map_batches, filter, flat_map, project, write)."""

    step: Step | None = None
    compute: Any = dataclasses.field(default_factory=TaskPoolStrategy)
    remote_args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False)
class AllToAll(LogicalOp):
    """A barrier operator: random_shuffle, sort, repartition, randomize_block_order, groupby."""

    kind: str = ""
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    remote_args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False)
class Limit(LogicalOp):
    """The first `limit` rows."""

    limit: int = 0


@dataclasses.dataclass(eq=False)
class Union(LogicalOp):
    """The rows of every input, one after the other."""


@dataclasses.dataclass(eq=False)
class Zip(LogicalOp):
    """The columns of every input side by side (equal row counts)."""


# --- physical operators --------------------------------------------------------------------

@dataclasses.dataclass(eq=False)
class PhysicalOp:
    """A node of the physical plan; the executor runs one runtime operator per node."""

    name: str
    inputs: list[PhysicalOp]


@dataclasses.dataclass(eq=False)
class PhysMap(PhysicalOp):
    """Runs `steps` per input block (or per read task) as tasks or on an actor pool."""

    steps: list[Step] = dataclasses.field(default_factory=list)
    compute: Any = dataclasses.field(default_factory=TaskPoolStrategy)
    remote_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    read: Read | None = None


@dataclasses.dataclass(eq=False)
class PhysInput(PhysicalOp):
    """Hands existing blocks to its consumer."""

    bundles: list[RefBundle] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class PhysAllToAll(PhysicalOp):
    kind: str = ""
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    remote_args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False)
class PhysLimit(PhysicalOp):
    limit: int = 0


@dataclasses.dataclass(eq=False)
class PhysUnion(PhysicalOp):
    pass


@dataclasses.dataclass(eq=False)
class PhysZip(PhysicalOp):
    pass


# --- optimizer -----------------------------------------------------------------------------

def normalized_remote_args(args: dict[str, Any]) -> dict[str, Any]:
    """Remote args with the defaults filled in (num_cpus=1), so equal shapes compare equal."""
    out = {k: v for k, v in args.items() if v is not None}
    out.setdefault("num_cpus", 1)
    if not out.get("num_gpus"):
        out.pop("num_gpus", None)
    if not out.get("resources"):
        out.pop("resources", None)
    return out


def optimize(op: LogicalOp) -> LogicalOp:
    """Pushes projections and expression filters that follow a read into the read."""
    inputs = [optimize(i) for i in op.inputs]
    if inputs != op.inputs:
        op = dataclasses.replace(op, inputs=inputs)
    if isinstance(op, MapOp) and len(op.inputs) == 1 and isinstance(op.inputs[0], Read):
        read = op.inputs[0]
        ds = read.datasource
        step = op.step
        if isinstance(step, Project) and step.select is not None and step.drop is None \
                and step.rename is None and getattr(ds, "supports_projection_pushdown", False) \
                and _default_compute(op):
            cols = list(step.select)
            if read.columns is not None:
                missing = [c for c in cols if c not in read.columns]
                if missing:
                    return op
            return dataclasses.replace(read, columns=cols, name=read.name)
        if isinstance(step, FilterExpr) and getattr(ds, "supports_filter_pushdown", False) \
                and isinstance(step.expr, pc.Expression) and _default_compute(op):
            new_filter = step.expr if read.filter is None else (read.filter & step.expr)
            return dataclasses.replace(read, filter=new_filter)
    return op


def _default_compute(op: MapOp) -> bool:
    return isinstance(op.compute, TaskPoolStrategy) and op.compute.size is None and \
        normalized_remote_args(op.remote_args) == {"num_cpus": 1}


def can_fuse(up: PhysicalOp, down: MapOp) -> bool:
    """Whether map operator `down` can run inside the tasks of physical operator `up`."""
    if not isinstance(up, PhysMap) or not isinstance(down.compute, TaskPoolStrategy):
        return False
    if not isinstance(up.compute, TaskPoolStrategy):
        return False
    if up.compute.size != down.compute.size and down.compute.size is not None:
        return False
    return normalized_remote_args(up.remote_args) == normalized_remote_args(down.remote_args)


def to_physical(op: LogicalOp, fuse: bool = True) -> PhysicalOp:
    """The physical plan of an (optimized) logical plan, fusing map operators."""
    if isinstance(op, Read):
        return PhysMap(name=op.name, inputs=[], steps=[], read=op,
                       compute=TaskPoolStrategy(size=op.concurrency),
                       remote_args=dict(op.remote_args))
    if isinstance(op, InputData):
        return PhysInput(name=op.name, inputs=[], bundles=list(op.bundles))
    ins = [to_physical(i, fuse) for i in op.inputs]
    if isinstance(op, MapOp):
        up = ins[0]
        assert op.step is not None
        if fuse and can_fuse(up, op):
            assert isinstance(up, PhysMap)
            return dataclasses.replace(up, name=f"{up.name}->{op.name}", steps=up.steps + [op.step],
                                       compute=up.compute if op.compute.size is None else op.compute)
        return PhysMap(name=op.name, inputs=[up], steps=[op.step], compute=op.compute,
                       remote_args=dict(op.remote_args))
    if isinstance(op, AllToAll):
        return PhysAllToAll(name=op.name, inputs=ins, kind=op.kind, params=dict(op.params),
                            remote_args=dict(op.remote_args))
    if isinstance(op, Limit):
        return PhysLimit(name=op.name, inputs=ins, limit=op.limit)
    if isinstance(op, Union):
        return PhysUnion(name=op.name, inputs=ins)
    if isinstance(op, Zip):
        return PhysZip(name=op.name, inputs=ins)
    raise TypeError(f"unknown logical operator {type(op).__name__}")


def topo_order(root: PhysicalOp) -> list[PhysicalOp]:
    """Every physical operator, inputs before their consumers."""
    out: list[PhysicalOp] = []
    seen: set[int] = set()

    def visit(o: PhysicalOp) -> None:
        if id(o) in seen:
            return
        seen.add(id(o))
        for i in o.inputs:
            visit(i)
        out.append(o)

    visit(root)
    return out


def describe(op: LogicalOp) -> str:
    """`Read -> Map(f) -> Filter(g)` (inputs of unions/zips in brackets)."""
    if not op.inputs:
        return op.name
    if len(op.inputs) == 1:
        return f"{describe(op.inputs[0])} -> {op.name}"
    return f"[{', '.join(describe(i) for i in op.inputs)}] -> {op.name}"


def is_actor_compute(c: Any) -> bool:
    return isinstance(c, ActorPoolStrategy)
