"""RemoteFunction: what @ember.remote makes of a function."""
from __future__ import annotations

import functools
from typing import Any

from ember_common import ids, tracing
from ember_common.proto import common_pb2

from ..objects.object_ref import ObjectRef
from ..objects.serialization import serialize
from ..owner import task_errors
from ..owner.task_queue import TaskEntry
from ..runtime_env import context as runtime_env
from . import scheduling, signatures
from .options import TASK_OPTIONS, fallback_selectors, resource_request, validate


class RemoteFunction:
    def __init__(self, function: Any, options: dict[str, Any]) -> None:
        validate(options, TASK_OPTIONS, f"remote function {function.__qualname__}")
        task_errors.check_retry_exceptions(options.get("retry_exceptions", False),
                                          f"remote function {function.__qualname__}")
        self._function = function
        self._options = options
        self._name = options.get("name") or function.__name__
        # (core, spec template, num_returns, key, placement depends on the calling task,
        #  retry_exceptions allowlist, signature)
        self._template: tuple[Any, ...] | None = None
        functools.update_wrapper(self, function)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by reference when this object is importable as module.qualname (so the
        receiver imports it), else by value as (function, options). Never carries the per-process
        submission template (a core worker and protobuf objects): a remote function that was
        already called must still travel inside other functions, classes and closures."""
        target = by_reference(self, self._function)
        if target is not None:
            return (import_object, target)
        return (_rebuild_remote_function, (self._function, self._options))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"Remote functions cannot be called directly. Instead of running "
                        f"'{self._name}()', try '{self._name}.remote()'.")

    def options(self, **options: Any) -> RemoteFunction:
        merged = {**self._options, **options}
        validate(options, TASK_OPTIONS, f"remote function {self._function.__qualname__}")
        task_errors.check_retry_exceptions(merged.get("retry_exceptions", False),
                                          f"remote function {self._function.__qualname__}")
        rf = RemoteFunction.__new__(RemoteFunction)
        rf.__dict__.update(self.__dict__)
        rf._options = merged
        rf._name = merged.get("name") or self._function.__name__
        rf._template = None
        return rf

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        from .. import worker as _w

        client = _w.client_connection()
        if client is not None:  # client mode: the task runs from the session's driver
            return client.call("task", client.define(self, self._function, self._options), args, kwargs)
        w = _w.global_worker()
        t = self._template
        if t is None or t[0] is not w.core:
            sig = signatures.of_function(self._function)  # checked before anything is exported
            if sig is not None:
                sig.check(args, kwargs, self._name)
            t = self._template = (w.core, *spec_template(w, self._function, self._name,
                                                         self._options), sig)
        elif t[6] is not None:
            t[6].check(args, kwargs, self._name)
        if t[4] and w.core.executor is not None:  # in a task: its group may capture this one
            return submit_in_context(w.core, t, self._options, args, kwargs)
        return submit_from_template(w.core, t[1], t[2], t[3], args, kwargs, t[5])

    def bind(self, *args: Any, **kwargs: Any) -> Any:
        """A FunctionNode of a lazy graph (ember.dag): runs as this task on dag.execute()."""
        from ember.dag.function_node import FunctionNode

        return FunctionNode(self, args, kwargs, dict(self._options))


def _rebuild_remote_function(function: Any, options: dict[str, Any]) -> RemoteFunction:
    return RemoteFunction(function, options)


def by_reference(obj: Any, wrapped: Any) -> tuple[str, str] | None:
    """(module, qualname) when obj is what importing wrapped's module and walking its qualname
    gives (so the receiver can import it instead of unpickling a copy); None for objects
    defined in __main__, inside functions, or replaced (e.g. by .options())."""
    import sys

    module = getattr(wrapped, "__module__", None)
    qualname = getattr(wrapped, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname:
        return None
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return (module, qualname) if found is obj else None


def import_object(module: str, qualname: str) -> Any:
    """The receiving side of by_reference."""
    import importlib

    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def build_args(core: Any, args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> tuple[list[common_pb2.TaskArg], list[str], list[ObjectRef]]:
    """Serializes call arguments: top-level ObjectRefs by reference, others by value (big values
    are put into the object store first and passed by reference)."""
    task_args: list[common_pb2.TaskArg] = []
    keep: list[ObjectRef] = []
    values = list(args) + list(kwargs.values())
    for i, v in enumerate(values):
        if isinstance(v, ObjectRef):
            keep.append(v)
            task_args.append(_ref_arg(v))
            continue
        try:
            sv = serialize(v)
        except TypeError as e:
            label = f"argument {i}" if i < len(args) else f"keyword argument {list(kwargs)[i - len(args)]!r}"
            raise TypeError(f"Could not serialize {label} of {what}: {e.__cause__ or e}") from e
        keep.extend(sv.contained_refs)  # nested refs stay alive until the task ends
        if sv.size > core.config.max_inline_bytes:
            ref = core.put_serialized(sv)
            keep.append(ref)
            task_args.append(_ref_arg(ref))
        else:
            task_args.append(common_pb2.TaskArg(value=sv.to_proto()))
    return task_args, list(kwargs), keep


def _ref_arg(ref: ObjectRef) -> common_pb2.TaskArg:
    ip, port, worker_id, node_id = ref.owner_address
    return common_pb2.TaskArg(ref=common_pb2.ObjectRefProto(
        object_id=ref.binary(), owner=common_pb2.Address(ip=ip, port=port, worker_id=worker_id, node_id=node_id)))


def streaming_default(fn: Any, num_returns: Any) -> Any:
    """Generator functions stream by default (Ray's behaviour); "dynamic" is not supported."""
    import inspect

    if num_returns is None:
        gen = inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)
        return "streaming" if gen else 1
    if num_returns == "dynamic":
        raise ValueError("num_returns='dynamic' is not supported; use num_returns='streaming' "
                         "(an ObjectRefGenerator)")
    return num_returns


def spec_template(w: Any, function: Any, name: str,
                  options: dict[str, Any]) -> tuple[Any, Any, Any, bool, Any]:
    """What every call of a remote function shares: (TaskSpec template, num_returns, queue key,
    whether the placement depends on the calling task, the retry_exceptions allowlist). Built
    once per function and process, so a call only fills in ids and arguments."""
    core = w.core
    num_returns = streaming_default(function, options.get("num_returns"))
    fid = w.functions.export(function, f"remote function {name}")
    max_retries = options.get("max_retries")
    if max_retries is None:
        max_retries = core.config.task_max_retries
    retry_flag, allowlist = task_errors.split(options.get("retry_exceptions", False))
    spec = common_pb2.TaskSpec(
        job_id=core.job_id, name=name,
        function=common_pb2.FunctionDescriptor(module=function.__module__ or "",
                                               qualname=function.__qualname__, function_id=fid),
        resources=resource_request(options, 1.0), max_retries=max_retries,
        retry_exceptions=retry_flag,
        streaming=num_returns == "streaming", caller=core.address_proto,
        serialized_runtime_env=runtime_env.resolve(options.get("runtime_env"),
                                                   f"runtime_env of remote function {name}"))
    # Set only when given: every call copies the template (test_scale_memory.py bounds a pending
    # task's memory).
    fallbacks = fallback_selectors(options.get("fallback_strategy"), f"remote function {name}")
    if options.get("label_selector") or fallbacks:
        spec.labels.CopyFrom(label_placement(options.get("label_selector"), fallbacks))
    placement = scheduling.resolve(options, f"remote function {name}", request=dict(spec.resources))
    return (spec, num_returns, with_placement(spec, placement),
            scheduling.needs_context(options), allowlist)


def label_placement(selector: dict[str, str] | None, fallbacks: list[dict[str, str]]) -> common_pb2.LabelPlacement:
    """TaskSpec.labels: Ray's label_selector and fallback_strategy, already checked."""
    return common_pb2.LabelPlacement(label_selector=selector or {},
                                     fallback_strategy=[common_pb2.LabelSelector(selector=s) for s in fallbacks])


def with_placement(spec: Any, placement: scheduling.Placement) -> Any:
    """Writes the placement into the spec; the queue key (resource shape, plus the placement
    unless it is the default: tasks bound for different groups or nodes never share a lease)."""
    key = tuple(sorted(spec.resources.items()))
    if spec.serialized_runtime_env:  # workers are pooled per runtime env: never shared across envs
        key = (*key, ("runtime_env", spec.serialized_runtime_env))
    if spec.HasField("labels"):  # a lease on a node they picked serves only them
        key = (*key, ("labels", tuple(sorted(spec.labels.label_selector.items())),
                      tuple(tuple(sorted(f.selector.items())) for f in spec.labels.fallback_strategy)))
    if placement == scheduling.DEFAULT:
        spec.ClearField("placement_group_id")
        spec.placement_group_bundle_index = 0
        spec.placement_group_capture_child_tasks = False
        return key
    spec.placement_group_id = placement.pg_id
    spec.placement_group_bundle_index = placement.bundle_index
    spec.placement_group_capture_child_tasks = placement.capture
    return (*key, placement)


def submit_in_context(core: Any, t: tuple[Any, ...], options: dict[str, Any], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    """A call from inside a task or actor whose placement group captures child tasks: the
    task goes into that group (Ray's placement_group_capture_child_tasks)."""
    from ..doors.placement_groups import current

    pg_id, capture = current()
    if not (pg_id and capture):
        return submit_from_template(core, t[1], t[2], t[3], args, kwargs, t[5])
    template = common_pb2.TaskSpec()
    template.CopyFrom(t[1])
    placement = scheduling.resolve(options, f"remote function {template.name}", pg_id, capture)
    key = with_placement(template, placement)
    return submit_from_template(core, template, t[2], key, args, kwargs, t[5])


def submit_from_template(core: Any, template: Any, num_returns: Any, key: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any], allowlist: Any = None) -> Any:
    task_args, kwarg_names, keep = build_args(core, args, kwargs, f"{template.name}()")
    task_id = ids.new_task_id()
    spec = common_pb2.TaskSpec()
    spec.CopyFrom(template)
    spec.task_id = task_id
    # Only non-empty lists: each repeated field touched grows the spec's upb arena, and that
    # arena is most of a pending task's memory (tests/integration/cluster/test_scale_memory.py bounds it).
    if task_args:
        spec.args.extend(task_args)
    if kwarg_names:
        spec.kwarg_names.extend(kwarg_names)
    if not template.streaming:
        spec.return_ids.extend(ids.object_id_for_return(task_id, i + 1)
                               for i in range(max(num_returns, 1)))
    left = False  # its submit span is left to its task-event record (tracing.submit_left)
    if tracing.enabled() and not (left := tracing.submit_left(spec, task_id)):
        tracing.task_submitted(spec, f"submit {template.name}")
    return hand_over(core, TaskEntry(spec, keep, template.max_retries, key, allowlist, left), num_returns,
                     core.submitter.submit)


def hand_over(core: Any, entry: TaskEntry, num_returns: Any, submit: Any, *submit_args: Any) -> Any:
    """Registers the caller's ownership of the results, hands the task to the core loop, and
    returns what .remote() returns: None, one ObjectRef, a list, or an ObjectRefGenerator."""
    spec = entry.spec
    if core.executor is not None and (running := core.executor.current_task()) is not None:
        entry.parent = running.task_id  # a child: a recursive cancel of its parent reaches it
    if spec.streaming:
        from ..owner.generator import GeneratorState, ObjectRefGenerator

        core.generators[spec.task_id] = GeneratorState()
        core.post(submit, entry, *submit_args)
        return ObjectRefGenerator(spec.task_id, core)
    refs = []
    for oid in spec.return_ids:
        core.register_owned(oid)
        refs.append(ObjectRef(oid, core.address, core))
    core.post(submit, entry, *submit_args)
    if num_returns == 0:
        return None
    return refs[0] if num_returns == 1 else refs
