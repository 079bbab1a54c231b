"""Serve's model multiplexing on a real cluster: @serve.multiplexed's per-replica LRU cache,
serve.get_multiplexed_model_id() through the HTTP header and through handle options, and
model-aware routing (the replica already holding a model gets its requests, in the driver's
handles and in the proxy, which learns it from the controller)."""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from ember import serve

HEADER = "serve_multiplexed_model_id"


@pytest.fixture(scope="module")
def url(serve_url):
    return serve_url


class _Model:
    def __init__(self, model_id: str, owner: Models) -> None:
        self.model_id = model_id
        self.owner = owner

    def __del__(self) -> None:
        self.owner.unloaded.append(self.model_id)


@serve.deployment
class Models:
    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.unloaded: list[str] = []

    @serve.multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str) -> _Model:
        await asyncio.sleep(0.3)  # a load takes a while (the replica reports it meanwhile)
        if model_id == "broken":
            raise RuntimeError("cannot load model broken")
        self.loaded.append(model_id)
        return _Model(model_id, self)

    async def _serve(self) -> dict:
        mid = serve.get_multiplexed_model_id()
        used = (await self.get_model(mid)).model_id if mid else None
        return {"id": mid, "used": used, "replica": serve.get_replica_context().replica_id,
                "loaded": list(self.loaded), "unloaded": list(self.unloaded)}

    async def __call__(self, request) -> dict:
        return await self._serve()

    async def infer(self) -> dict:
        return await self._serve()

    async def stream_ids(self):
        for _ in range(3):
            yield serve.get_multiplexed_model_id()
            await asyncio.sleep(0.05)  # (later items come from the replica's pump, not the call)


@serve.deployment
class Upstream:
    def __init__(self, down) -> None:
        self.down = down

    async def __call__(self, request) -> dict:
        mid = serve.get_multiplexed_model_id()
        passed = await self.down.options(multiplexed_model_id=mid).infer.remote()
        plain = await self.down.infer.remote()
        return {"mine": mid, "passed": passed["id"], "plain": plain["id"]}


def test_lru_eviction_and_concurrent_loads_through_handles(url):
    h = serve.run(Models.options(num_replicas=1).bind(), name="lru", route_prefix="/lru")
    seen = [h.options(multiplexed_model_id=m).infer.remote().result(timeout_s=60)
            for m in ("a", "b", "a", "c", "b")]
    assert [s["id"] for s in seen] == ["a", "b", "a", "c", "b"]
    assert [s["used"] for s in seen] == ["a", "b", "a", "c", "b"]
    last = seen[-1]
    # "a" was used again before "c" came, so "c" evicted "b"; then "b" evicted "a"
    assert last["loaded"] == ["a", "b", "c", "b"]
    assert last["unloaded"] == ["b", "a"]  # each evicted model's __del__ ran once
    # concurrent requests for a model not loaded: one load
    resps = [h.options(multiplexed_model_id="d").infer.remote() for _ in range(6)]
    outs = [r.result(timeout_s=60) for r in resps]
    assert all(o["used"] == "d" for o in outs)
    after = h.options(multiplexed_model_id="d").infer.remote().result(timeout_s=60)
    assert after["loaded"].count("d") == 1
    assert after["unloaded"] == ["b", "a", "c"]
    # no model id: "" and nothing loaded
    assert h.infer.remote().result(timeout_s=60)["id"] == ""
    # a streamed call's generator sees the id for its whole life
    assert list(h.options(stream=True, multiplexed_model_id="s1").stream_ids.remote()) == ["s1"] * 3
    serve.delete("lru")


def test_model_id_from_the_http_header_and_a_failed_load(url):
    serve.run(Models.options(num_replicas=1).bind(), name="hdr", route_prefix="/hdr")
    with httpx.Client(timeout=60) as c:
        r = c.get(url + "/hdr", headers={HEADER: "m1"})
        assert r.status_code == 200, r.text
        assert (r.json()["id"], r.json()["used"]) == ("m1", "m1")
        assert c.get(url + "/hdr").json()["id"] == ""
        r = c.get(url + "/hdr", headers={HEADER: "broken"})
        assert r.status_code == 500 and "cannot load model broken" in r.text
        r = c.get(url + "/hdr", headers={HEADER: "m1"})  # the replica keeps serving
        assert r.status_code == 200 and r.json()["loaded"] == ["m1"]
    serve.delete("hdr")


def test_handle_calls_inside_a_request_pass_the_model_id_only_when_asked(url):
    serve.run(Upstream.bind(Models.options(num_replicas=1).bind()), name="up", route_prefix="/up")
    with httpx.Client(timeout=60) as c:
        r = c.get(url + "/up", headers={HEADER: "m7"})
    assert r.status_code == 200, r.text
    # as in Ray: options(multiplexed_model_id=...) passes it on; a plain call does not inherit it
    assert r.json() == {"mine": "m7", "passed": "m7", "plain": ""}
    serve.delete("up")


def test_requests_for_a_model_go_to_the_replica_holding_it(url):
    h = serve.run(Models.options(num_replicas=2, max_ongoing_requests=8).bind(), name="aff",
                  route_prefix="/aff")
    seen: set[str] = set()  # (until this driver's router has both replicas: its snapshot follows)
    for _ in range(200):
        seen.add(h.infer.remote().result(timeout_s=60)["replica"])
        if len(seen) == 2:
            break
    assert len(seen) == 2
    first = {m: h.options(multiplexed_model_id=m).infer.remote().result(timeout_s=60)["replica"]
             for m in ("a", "b")}
    assert first["a"] != first["b"]  # a new model goes to the replica holding fewer
    for _ in range(3):  # (4 requests in flight per model at once)
        resps = [(m, h.options(multiplexed_model_id=m).infer.remote()) for m in ("a", "b") * 4]
        for m, r in resps:
            out = r.result(timeout_s=60)
            assert out["replica"] == first[m], (m, out)
            assert out["loaded"].count(m) == 1  # loaded once, never again
    # The proxy never saw these models: it learns where each one is from the replicas' reports
    # (through the controller), so its first request for each already goes to the holder.
    with httpx.Client(timeout=60) as c:
        for i in range(6):
            mid = f"x{i}"
            holder = h.options(multiplexed_model_id=mid).infer.remote().result(timeout_s=60)["replica"]
            time.sleep(0.5)  # (the report reached the controller while the model loaded)
            out = c.get(url + "/aff", headers={HEADER: mid}).json()
            assert out["replica"] == holder, (mid, out)
            assert out["loaded"].count(mid) == 1, out
    serve.delete("aff")


class _Logged:
    def __init__(self, model_id: str, log_path: str) -> None:
        self.model_id, self.log_path = model_id, log_path
        self.unloaded = False

    async def __del__(self) -> None:  # awaited by Serve at eviction and when the replica stops
        if self.unloaded:
            return
        self.unloaded = True
        await asyncio.sleep(0.05)
        with open(self.log_path, "a") as f:
            f.write(self.model_id + "\n")


@serve.deployment
class LoggedModels:
    def __init__(self, log_path: str) -> None:
        self.log_path = log_path

    @serve.multiplexed(max_num_models_per_replica=1)
    async def get_model(self, model_id: str) -> _Logged:
        return _Logged(model_id, self.log_path)

    async def __call__(self) -> str:
        return (await self.get_model(serve.get_multiplexed_model_id())).model_id


def test_async_del_is_awaited_at_eviction_and_when_the_replica_stops(url, tmp_path):
    log_path = str(tmp_path / "unloaded.txt")
    h = serve.run(LoggedModels.bind(log_path), name="del", route_prefix="/del")
    assert h.options(multiplexed_model_id="p").remote().result(timeout_s=60) == "p"
    assert h.options(multiplexed_model_id="q").remote().result(timeout_s=60) == "q"  # evicts "p"
    with open(log_path) as f:
        assert f.read().split() == ["p"]
    serve.delete("del")  # the replica unloads what it holds before it goes
    with open(log_path) as f:
        assert f.read().split() == ["p", "q"]
