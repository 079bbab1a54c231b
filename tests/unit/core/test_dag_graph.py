"""ember.dag's graph code without a cluster: children, copies, walks, bind order, plans."""
from __future__ import annotations

import pickle

import pytest

import ember
from ember.dag import DAGNode, InputNode, MultiOutputNode
from ember.dag.executor import plan


@ember.remote
def f(*args):
    return args


@ember.remote
class A:
    def m(self, x):
        return x


def test_children_top_level_and_nested():
    a, b, c = f.bind(1), f.bind(2), f.bind(3)
    n = f.bind(a, [b, {"k": (c,)}], key=a)
    assert n._get_toplevel_child_nodes() == [a]
    assert n._get_all_child_nodes() == [a, b, c]
    assert n.get_args()[0] is a and n.get_kwargs() == {"key": a}


def test_apply_recursive_bottom_up_and_once_per_node():
    seen = []
    a = f.bind(1)
    root = MultiOutputNode([f.bind(a), f.bind(a)])

    def fn(node: DAGNode) -> str:
        seen.append(type(node).__name__)
        return f"{type(node).__name__}{node.get_args()}"

    out = root.apply_recursive(fn)
    assert seen.count("FunctionNode") == 3  # a once, though two nodes use it
    assert out.startswith("MultiOutputNode")
    copy = root._apply_and_replace_all_child_nodes(lambda n: n)
    assert copy is not root and copy.get_stable_uuid() == root.get_stable_uuid()


def test_plan_is_topological_and_bind_order_links_actor_calls():
    actor = A.bind()
    first = actor.m.bind(1)
    second = actor.m.bind(2)
    order = [s.node for s in plan(second)]
    assert order.index(actor) < order.index(first) < order.index(second)
    deep = f.bind(0)
    for _ in range(3000):  # no recursion limit on long chains
        deep = f.bind(deep)
    assert len(plan(deep)) == 3001


def test_input_attribute_nodes_are_shared_and_nodes_do_not_pickle():
    with InputNode() as inp:
        assert inp.x is inp.x and inp[0] is inp[0]
        n = f.bind(inp.x, inp[0])
    with pytest.raises(ValueError, match="cannot be serialized"):  # as Ray's
        pickle.dumps(n)
    with pytest.raises(ValueError, match="cannot be serialized"):
        pickle.dumps(DAGNode([], {}, {}, {}))


def test_misuse_messages_as_rays():
    with pytest.raises(AttributeError, match=r"\.bind\(\) cannot be used again on"):
        _ = A.bind().bind()
    with pytest.raises(AttributeError, match=r"\.remote\(\) cannot be used on ClassMethodNodes"):
        _ = A.bind().m.remote()
    with pytest.raises(AttributeError, match="'A' has no attribute 'remote'"):
        _ = A.bind().remote()
    with pytest.raises(AttributeError, match=r"\.remote\(\) cannot be used on"):
        _ = f.bind().remote()
    opts = A.options(name="n", namespace="ns", max_pending_calls=10).bind()
    assert opts.get_options()["max_pending_calls"] == 10
    assert A.bind().m.options(name="x").bind(1).get_options() == {"name": "x"}
