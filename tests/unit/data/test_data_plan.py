"""Pure tests of Ember Data's logical plan, optimizer (pushdown) and operator fusion."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ember.data._internal import plan as P
from ember.data._internal import transforms as T
from ember.data._internal.compute import ActorPoolStrategy, TaskPoolStrategy, get_compute
from ember.data.expressions import to_arrow_expression


class _Source:
    supports_projection_pushdown = True
    supports_filter_pushdown = True


def _read() -> P.Read:
    return P.Read(name="ReadParquet", inputs=[], datasource=_Source())


def _map(inp: P.LogicalOp, name: str, compute=None, **ra) -> P.MapOp:
    udf = T._UDF(lambda b: b)
    return P.MapOp(name=name, inputs=[inp], step=T.MapBatches(udf, name, None, "pyarrow", True),
                   compute=compute or TaskPoolStrategy(), remote_args=ra)


def test_consecutive_task_maps_fuse_into_the_read():
    root = _map(_map(_read(), "MapBatches(a)"), "MapBatches(b)")
    phys = P.to_physical(P.optimize(root))
    assert isinstance(phys, P.PhysMap)
    assert phys.name == "ReadParquet->MapBatches(a)->MapBatches(b)"
    assert len(phys.steps) == 2 and phys.read is not None and phys.inputs == []


def test_different_resources_or_actor_pools_break_fusion():
    gpu = _map(_map(_read(), "MapBatches(a)"), "MapBatches(q)", num_gpus=0.25)
    phys = P.to_physical(gpu)
    assert phys.name == "MapBatches(q)" and phys.inputs[0].name == "ReadParquet->MapBatches(a)"
    actor = _map(_read(), "MapBatches(C)", compute=ActorPoolStrategy(size=2))
    phys = P.to_physical(actor)
    assert phys.name == "MapBatches(C)" and isinstance(phys.inputs[0], P.PhysMap)
    # after an actor operator, task operators start a new fused group
    after = _map(_map(actor, "MapBatches(x)"), "MapBatches(y)")
    phys = P.to_physical(after)
    assert phys.name == "MapBatches(x)->MapBatches(y)"


def test_fusion_off_keeps_every_operator():
    root = _map(_map(_read(), "MapBatches(a)"), "MapBatches(b)")
    names = [o.name for o in P.topo_order(P.to_physical(root, fuse=False))]
    assert names == ["ReadParquet", "MapBatches(a)", "MapBatches(b)"]


def test_all_to_all_is_a_boundary():
    root = _map(P.AllToAll(name="RandomShuffle", inputs=[_map(_read(), "Map(a)")],
                           kind="random_shuffle"), "Map(b)")
    names = [o.name for o in P.topo_order(P.to_physical(root))]
    assert names == ["ReadParquet->Map(a)", "RandomShuffle", "Map(b)"]


def test_projection_is_pushed_into_the_read():
    root = P.MapOp(name="Project", inputs=[_read()], step=T.Project(select=["a", "b"]))
    opt = P.optimize(root)
    assert isinstance(opt, P.Read) and opt.columns == ["a", "b"]


def test_drop_columns_is_not_pushed():
    root = P.MapOp(name="Project", inputs=[_read()], step=T.Project(drop=["a"]))
    assert isinstance(P.optimize(root), P.MapOp)


def test_expression_filters_are_pushed_and_combined():
    e1 = to_arrow_expression("x > 3")
    e2 = to_arrow_expression("lang == 'zh'")
    root = P.MapOp(name="Filter", inputs=[P.MapOp(name="Filter", inputs=[_read()],
                                                  step=T.FilterExpr(e1, "f1"))],
                   step=T.FilterExpr(e2, "f2"))
    opt = P.optimize(root)
    assert isinstance(opt, P.Read)
    t = pa.table({"x": [1, 4, 5], "lang": ["zh", "zh", "en"]})
    assert t.filter(opt.filter).to_pydict() == {"x": [4], "lang": ["zh"]}


def test_a_filter_behind_a_udf_is_not_pushed():
    e = to_arrow_expression("x > 3")
    root = P.MapOp(name="Filter", inputs=[_map(_read(), "Map(a)")], step=T.FilterExpr(e, "f"))
    assert isinstance(P.optimize(root), P.MapOp)


def test_string_expressions():
    t = pa.table({"x": [1, 2, 3, 4], "s": ["a", "b", "c", None]})
    assert t.filter(to_arrow_expression("x >= 2 and not x == 3")).column("x").to_pylist() == [2, 4]
    assert t.filter(to_arrow_expression("s in ['a', 'c'] or x * 2 == 8")).column("x").to_pylist() == [1, 3, 4]
    assert t.filter(to_arrow_expression("is_null(s)")).column("x").to_pylist() == [4]
    assert isinstance(to_arrow_expression(pc.field("x") > 1), pc.Expression)
    with pytest.raises(ValueError, match="invalid filter expression"):
        to_arrow_expression("x >")
    with pytest.raises(ValueError, match="unsupported"):
        to_arrow_expression("x.y > 1")


def test_compute_strategy_follows_ray():
    class C:
        def __call__(self, b):
            return b

    def f(b):
        return b

    assert get_compute(f, None, None) == TaskPoolStrategy()
    assert get_compute(f, None, 3) == TaskPoolStrategy(size=3)
    s = get_compute(C, None, (1, 4))
    assert (s.min_size, s.max_size) == (1, 4)
    assert get_compute(C, None, 2).max_size == 2
    assert get_compute(C, None, None).max_size is None
    with pytest.raises(ValueError, match="callable class"):
        get_compute(C, TaskPoolStrategy(), None)
    with pytest.raises(ValueError, match="not a callable class"):
        get_compute(f, None, (1, 2))
    with pytest.raises(ValueError, match="fn_constructor_args"):
        get_compute(f, None, None, fn_constructor_args=(1,))
    with pytest.raises(ValueError, match="max_size"):
        ActorPoolStrategy(min_size=3, max_size=2)


def test_describe():
    root = P.Union(name="Union", inputs=[_read(), _map(_read(), "Map(f)")])
    assert P.describe(root) == "[ReadParquet, ReadParquet -> Map(f)] -> Union"


def test_repr_tree_of_branches_and_long_column_names():
    from ember.data._internal.plan_repr import format_dataset, plan_lines

    root = P.Union(name="Union", inputs=[_map(_read(), "Map(f)"), _map(_read(), "Map(g)")])
    lines, depth = plan_lines(root)
    assert (lines, depth) == (["Union", "+- Map(f)", "+- Map(g)"], 2)
    assert format_dataset("Dataset", lines, depth, None, None, None) == (
        "Union\n+- Map(f)\n+- Map(g)\n   +- Dataset(num_rows=?, schema=Unknown schema)")
    # a column line over 80 characters is cut to 80 with "...: <type>" at its end
    out = format_dataset("MaterializedDataset", [], 0, 3, 5, [("n" * 90, pa.int64())])
    assert out == ("MaterializedDataset(\n   num_blocks=3,\n   num_rows=5,\n   schema={\n"
                   f"      {'n' * 64}...: int64\n   }}\n)")
