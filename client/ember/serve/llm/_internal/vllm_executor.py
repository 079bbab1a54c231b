"""vLLM's tensor-parallel workers as Ember actors: a distributed executor class for vLLM.

vLLM accepts an executor class as `distributed_executor_backend` (a subclass of
`vllm.v1.executor.abstract.Executor`); the engine core then calls `_init_executor()` once and
`collective_rpc(method, timeout, args, kwargs, non_block)` for everything else (the base class
builds execute_model / sample_tokens / determine_available_memory / initialize_from_config on
it, taking the output rank's reply). This executor:

1. joins the Ember cluster if the engine core runs in a process of its own (vLLM's V1 engine
   core is a subprocess of the replica; the replica exports EMBER_ADDRESS for it),
2. starts `world_size` EmberWorker actors, one GPU each (`_worker_options(rank)`: today plain
   `num_gpus=1` actors; with a placement group — `parallel_config.placement_group`, or the
   `placement_group` engine argument — each rank is pinned to
   its bundle, the same shape as Ray's executor, so the whole group is reserved atomically),
3. orders ranks so that workers on one node are contiguous, gives every worker all the node's
   GPUs in CUDA_VISIBLE_DEVICES with its local rank as the index (NCCL and custom all-reduce
   need to see the peers), and runs vLLM's own worker (`WorkerWrapperBase`) in each actor:
   init_worker → init_device → load_model,
4. sends every collective_rpc to all workers as actor calls (in order per worker) and gathers
   the replies with `ember.get` (or a Future for non_block).

Only importable where vllm is installed. Tested on GPU machines (tests/integration/
test_llm_vllm.py); skipped elsewhere.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable

import cloudpickle
from vllm.v1.executor.abstract import Executor

import ember
from ember_common import envvars


class EmberWorker:
    """One vLLM worker (one GPU) inside an Ember actor."""

    def __init__(self, rpc_rank: int, vllm_config: Any) -> None:
        from vllm.v1.worker.worker_base import WorkerWrapperBase

        try:
            self.wrapper = WorkerWrapperBase(vllm_config=vllm_config, rpc_rank=rpc_rank)
        except TypeError:  # releases whose wrapper takes no config
            self.wrapper = WorkerWrapperBase(rpc_rank=rpc_rank)

    def node_and_gpus(self) -> tuple[str, list[int]]:
        return ember.get_runtime_context().get_node_id(), [int(g) for g in ember.get_gpu_ids()]

    def node_ip(self) -> str:
        from vllm.utils.network_utils import get_ip

        ip: str = get_ip()  # (typed by vllm where it is installed)
        return ip

    def execute_method(self, method: str | bytes, *args: Any, **kwargs: Any) -> Any:
        from vllm.v1.serial_utils import run_method

        return run_method(self.wrapper, method, args, kwargs)


# Without vllm installed (where `make lint` runs) Executor is Any; with it, the ignore is unused.
class EmberDistributedExecutor(Executor):  # type: ignore[misc, unused-ignore]
    """vLLM executor whose workers are Ember actors."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        if not ember.is_initialized():  # the engine core's own process
            ember.init(address=envvars.get("EMBER_ADDRESS") or "auto", log_to_driver=False)
        pc = self.parallel_config
        n = pc.world_size
        cls = ember.remote(EmberWorker)
        workers = [cls.options(**self._worker_options(rank)).remote(rank, self.vllm_config) for rank in range(n)]
        placement = ember.get([w.node_and_gpus.remote() for w in workers])
        order = sorted(range(n), key=lambda i: (placement[i][0], placement[i][1]))
        self.workers = [workers[i] for i in order]
        placement = [placement[i] for i in order]
        self.collective_rpc("adjust_rank", args=({order[new]: new for new in range(n)},))
        node_gpus: dict[str, list[int]] = {}
        for node, gpus in placement:
            node_gpus.setdefault(node, []).extend(gpus)
        envs = [{"CUDA_VISIBLE_DEVICES": ",".join(map(str, sorted(node_gpus[node])))} for node, _ in placement]
        self.collective_rpc("update_environment_variables", args=(envs,))
        from vllm.utils.network_utils import get_distributed_init_method, get_open_port

        ip = "127.0.0.1" if len(node_gpus) == 1 else ember.get(self.workers[0].node_ip.remote())
        init_method = get_distributed_init_method(ip, get_open_port())
        all_kwargs = []
        for rank, (node, gpus) in enumerate(placement):
            local_rank = sorted(node_gpus[node]).index(gpus[0]) if gpus else 0
            all_kwargs.append(dict(vllm_config=self.vllm_config, local_rank=local_rank, rank=rank,
                                   distributed_init_method=init_method,
                                   is_driver_worker=rank % pc.tensor_parallel_size == 0))
        self.collective_rpc("init_worker", args=(all_kwargs,))
        self.collective_rpc("init_device")
        self.collective_rpc("load_model")

    def _worker_options(self, rank: int) -> dict[str, Any]:
        """Actor options of one rank: a GPU; pinned to its bundle when a placement group is given
        (the one place that places a rank)."""
        opts: dict[str, Any] = {"num_cpus": 0, "num_gpus": 1}  # one call at a time: in order
        pg = getattr(self.parallel_config, "placement_group", None)
        if pg is not None:
            from ember.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=pg, placement_group_bundle_index=rank, placement_group_capture_child_tasks=True)
        return opts

    @property
    def max_concurrent_batches(self) -> int:
        return 1

    def collective_rpc(self, method: str | Callable[..., Any], timeout: float | None = None, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None, non_block: bool = False,
                       **_: Any) -> Any:
        sent = method if isinstance(method, str) else cloudpickle.dumps(method)
        refs = [w.execute_method.remote(sent, *args, **(kwargs or {})) for w in self.workers]
        if not non_block:
            return ember.get(refs, timeout=timeout)
        fut: Future[Any] = Future()

        def wait() -> None:
            try:
                fut.set_result(ember.get(refs, timeout=timeout))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)

        import threading

        threading.Thread(target=wait, daemon=True).start()
        return fut

    def check_health(self) -> None:
        ember.get([w.node_and_gpus.remote() for w in self.workers], timeout=30)

    def shutdown(self) -> None:
        for w in getattr(self, "workers", []):
            try:
                ember.kill(w)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.workers = []
