"""The DAG API (`ray.dag`) on an embedded cluster, written from Ray's DAG guide and its tests:
`.bind()` on functions, actor classes and actor methods, InputNode with index/attribute/key
access, MultiOutputNode, and what execute() returns."""
from __future__ import annotations

import pytest

import ember
from ember.dag import ClassMethodNode, ClassNode, FunctionNode, InputNode, MultiOutputNode


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield ember
    ember.shutdown()


@ember.remote
def add(a, b):
    return a + b


@ember.remote
def mul(a, b):
    return a * b


@ember.remote
def total(values):
    return sum(ember.get(values))


@ember.remote
class Counter:
    def __init__(self, start):
        self.i = start

    def inc(self, x):
        self.i += x
        return self.i

    def get(self):
        return self.i


def test_function_chain_returns_an_object_ref(cluster):
    dag = add.bind(mul.bind(2, 3), 4)
    assert isinstance(dag, FunctionNode)
    ref = dag.execute()
    assert isinstance(ref, ember.ObjectRef)
    assert ember.get(ref) == 10
    assert ember.get(dag.execute()) == 10  # a graph runs again


def test_input_node_positional_keyword_index_attribute_and_key(cluster):
    with InputNode() as inp:
        dag = add.bind(inp[0], inp.y)
    assert ember.get(dag.execute(1, y=2)) == 3
    with InputNode() as inp:
        dag = mul.bind(inp[0], inp[1])
    assert ember.get(dag.execute(4, 5)) == 20
    assert ember.get(dag.execute([6, 7])) == 42  # one argument: indexed itself
    with InputNode() as inp:
        dag = add.bind(inp["a"], inp["b"])
    assert ember.get(dag.execute({"a": 1, "b": 10})) == 11

    class Data:
        m1, m2 = 3, 4

    with InputNode() as inp:
        dag = mul.bind(inp.m1, inp.m2)
    assert ember.get(dag.execute(Data())) == 12
    with InputNode() as inp:
        dag = add.bind(inp, 1)  # the whole input
    assert ember.get(dag.execute(41)) == 42


def test_actor_class_and_methods_in_bind_order(cluster):
    c = Counter.bind(10)
    assert isinstance(c, ClassNode)
    c.inc.bind(5)  # bound before get: runs first although the output does not use it
    dag = c.get.bind()
    assert isinstance(dag, ClassMethodNode)
    assert ember.get(dag.execute()) == 15
    # A class node's execute() gives the actor's handle; each execute() makes a new actor.
    h = Counter.bind(7).execute()
    assert isinstance(h, ember.actor.ActorHandle)
    assert ember.get(h.get.remote()) == 7


def test_docs_ensemble_with_actors_and_input(cluster):
    @ember.remote
    class Model:
        def __init__(self, w):
            self.w = w

        def forward(self, x):
            return self.w * x

    with InputNode() as inp:
        m1, m2 = Model.bind(1), Model.bind(2)
        dag = add.bind(m1.forward.bind(inp[0]), m2.forward.bind(inp.x))
    assert ember.get(dag.execute(1, x=2)) == 5


def test_methods_bound_on_a_live_handle_reuse_the_actor(cluster):
    h = Counter.remote(0)
    with InputNode() as inp:
        dag = h.inc.bind(inp)
    assert [ember.get(dag.execute(i)) for i in (1, 2, 3)] == [1, 3, 6]
    assert ember.get(h.get.remote()) == 6


def test_multi_output_node_returns_a_list_of_refs(cluster):
    with InputNode() as inp:
        dag = MultiOutputNode([add.bind(inp, 1), mul.bind(inp, 2), Counter.bind(5).inc.bind(inp)])
    refs = dag.execute(3)
    assert isinstance(refs, list) and all(isinstance(r, ember.ObjectRef) for r in refs)
    assert ember.get(refs) == [4, 6, 8]


def test_nodes_nested_in_arguments_arrive_as_refs(cluster):
    a, b = add.bind(1, 1), add.bind(2, 2)
    assert ember.get(total.bind([a, b]).execute()) == 6
    assert ember.get(add.bind(a, a).execute()) == 4  # one node, one task, used twice


def test_options_and_errors_propagate(cluster):
    @ember.remote
    def boom(x):
        raise ValueError(f"bad {x}")

    dag = add.options(num_cpus=0.5).bind(boom.bind(1), 1)
    with pytest.raises(ValueError, match="bad 1"):
        ember.get(dag.execute())
    with InputNode() as inp:
        dag = add.bind(inp[0], inp[5])
    with pytest.raises(IndexError, match="index 5"):
        dag.execute(1, 2)
    assert ember.get(add.remote(1, 2)) == 3  # the cluster still works


def test_misuse_is_refused(cluster):
    node = add.bind(1, 2)
    with pytest.raises(AttributeError, match="execute"):
        node.remote()
    with pytest.raises(AttributeError, match="again"):
        node.bind()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = Counter.bind(1).nope
    inp = InputNode()  # not in a with block
    with pytest.raises(AssertionError, match="with block"):
        add.bind(inp, 1).execute(1)
    with InputNode() as a, InputNode() as b:
        dag = add.bind(a, b)
    with pytest.raises(ValueError, match="one InputNode"):
        dag.execute(1)
    with InputNode() as inp, pytest.raises(ValueError, match="constructor"):
        Counter.bind(inp)
    with pytest.raises(NotImplementedError, match="experimental_compile"):
        add.bind(1, 1).experimental_compile()


def test_actor_nodes_as_arguments_of_actors_and_tasks(cluster):
    @ember.remote
    class Outer:
        def __init__(self, inner):
            self.inner = inner

        def inc(self, x):
            return ember.get(self.inner.inc.remote(x))

    @ember.remote
    def read(counter):
        return ember.get(counter.get.remote())

    outer = Outer.bind(Counter.bind(10))
    outer.inc.bind(2)
    assert ember.get(outer.inc.bind(3).execute()) == 15
    assert ember.get(read.bind(Counter.bind(4)).execute()) == 4
    a1, a2 = Counter.options(name=None).bind(10), Counter.bind(10)
    a1.inc.options(name="first").bind(2)
    a1.inc.bind(4)
    a2.inc.bind(6)
    dag = add.options(name="combine").bind(a1.get.bind(), a2.get.bind())
    assert ember.get(dag.execute()) == 32
