"""CPU cost of the owner's lineage bookkeeping (ember._private.owner.lineage, pure): record and
release per task, in process time (robust under load). Only tasks with a return in shared
memory are recorded, so tasks with inline returns pay none of this.

    .venv/bin/python scripts/bench_lineage.py [--tasks 20000] [--arg-bytes 200]
"""
from __future__ import annotations

import argparse
import time

from ember._private.owner.lineage import Lineage
from ember_common import ids
from ember_common.proto import common_pb2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20000)
    p.add_argument("--arg-bytes", type=int, default=200, help="inline argument bytes per spec")
    a = p.parse_args()
    specs = []
    prev: bytes | None = None
    for _ in range(a.tasks):  # a chain: each task takes the previous one's return
        tid = ids.new_task_id()
        s = common_pb2.TaskSpec(task_id=tid, name="f", max_retries=3)
        s.return_ids.append(ids.object_id_for_return(tid, 1))
        s.args.append(common_pb2.TaskArg(value=common_pb2.SerializedObject(data=b"x" * a.arg_bytes)))
        if prev is not None:
            s.args.append(common_pb2.TaskArg(ref=common_pb2.ObjectRefProto(
                object_id=prev, owner=common_pb2.Address(worker_id="me"))))
        prev = s.return_ids[0]
        specs.append(s)
    lin = Lineage("me")
    t0 = time.process_time()
    for s in specs:
        lin.record(s, (), None, 3, lambda _: True)
    t1 = time.process_time()
    for s in specs:
        lin.release(s.return_ids[0])
    t2 = time.process_time()
    n = len(specs)
    print(f"{n} tasks: record {1e6 * (t1 - t0) / n:.2f} us/task, release {1e6 * (t2 - t1) / n:.2f} "
          f"us/task (CPU); entries left {len(lin)}, bytes left {lin.bytes}")


if __name__ == "__main__":
    main()
