"""CPU cost of the request checks on the task hot path, in one process (no sockets).

TaskStream carries every task a driver pushes to a worker; the worker checks each spec with
`validate_rules.task_spec_problem` before it runs it. This times that check (and, for scale,
parsing the same spec from bytes, which the worker pays anyway) on a few spec shapes the client
sends: a task without arguments, one with two inline arguments, one with an argument by
reference, an actor call. CPU time (`time.process_time`), so other load on the machine costs
less accuracy than wall time would.

    .venv/bin/python scripts/bench_validate.py [--n 20000] [--rounds 5]

Prints, per shape, the best round's microseconds per check and per parse.
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable

from ember_common import ids
from ember_common.proto import common_pb2
from ember_common.validate_rules import task_spec_problem


def _specs() -> dict[str, common_pb2.TaskSpec]:
    task_id = ids.new_task_id()
    owner = common_pb2.Address(ip="10.0.0.1", port=40123, worker_id="w" * 28, node_id="n" * 28)
    base = dict(task_id=task_id, job_id=b"\0\0\0\1", name="f", return_ids=[ids.object_id_for_return(task_id, 1)],
                function=common_pb2.FunctionDescriptor(function_id="f" * 40), resources={"CPU": 1.0},
                max_retries=3, caller=owner, trace_parent=bytes.fromhex("a" * 32 + "b" * 16 + "01"))
    inline = [common_pb2.TaskArg(value=common_pb2.SerializedObject(data=b"\x80\x05K\x01."))] * 2
    by_ref = [common_pb2.TaskArg(ref=common_pb2.ObjectRefProto(object_id=ids.new_put_id(), owner=owner))]
    return {
        "no args": common_pb2.TaskSpec(**base),
        "2 inline args": common_pb2.TaskSpec(**base, args=inline),
        "1 arg by ref": common_pb2.TaskSpec(**base, args=by_ref),
        "actor call": common_pb2.TaskSpec(**base, actor_id=ids.random_bytes(ids.ACTOR_ID_LEN), method_name="m",
                                          seq_no=7, args=inline[:1]),
    }


def _per_call_us(fn: Callable[[], Any], n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000, help="checks per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"{'spec':<16} {'check us':>9} {'parse us':>9}")
    for name, spec in _specs().items():
        assert task_spec_problem(spec) is None, (name, task_spec_problem(spec))
        data = spec.SerializeToString()
        check = _per_call_us(lambda s=spec: task_spec_problem(s), args.n, args.rounds)
        parse = _per_call_us(lambda d=data: common_pb2.TaskSpec.FromString(d), args.n, args.rounds)
        print(f"{name:<16} {check:9.2f} {parse:9.2f}")
    with open("/proc/loadavg") as f:
        print(f"load average: {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
