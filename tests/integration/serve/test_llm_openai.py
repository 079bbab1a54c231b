"""The OpenAI-compatible app on an embedded cluster, driven by the official `openai` client
through Serve's HTTP proxy: models, completions, chat, streaming, usage, concurrent streams,
a disconnect freeing its batch slot, error shapes, metrics and the LLMServer alone."""
from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import urllib.request

import httpx
import pytest

pytest.importorskip("torch", reason="the llm extra (torch, transformers) is not installed")
openai = pytest.importorskip("openai", reason="the llm extra (openai) is not installed")

from ember import serve  # noqa: E402
from ember.serve.llm import LLMConfig, build_llm_deployment, build_openai_app  # noqa: E402
from ember.serve.llm.testing import build_tiny_model  # noqa: E402
from ember.testing import process_gone, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"))


@pytest.fixture(scope="module")
def app(serve_url, model_dir):
    cfg = LLMConfig(model_loading_config={"model_id": "tiny", "model_source": model_dir}, llm_engine="torch",
                    engine_kwargs={"max_num_seqs": 8})
    serve.run(build_openai_app({"llm_configs": [cfg]}), name="llm", route_prefix="/")
    yield serve_url
    serve.delete("llm")


@pytest.fixture
def client(app):
    with openai.OpenAI(base_url=app + "/v1", api_key="unused", max_retries=0, timeout=60) as c:
        yield c


def _server():
    return serve.get_deployment_handle("LLMServer:tiny", "llm")


def test_models_and_completion(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    r = client.completions.create(model="tiny", prompt="Hello world", max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.model == "tiny"
    assert r.choices[0].finish_reason == "length" and r.choices[0].text
    assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens > 0
    again = client.completions.create(model="tiny", prompt="Hello world", max_tokens=8, temperature=0)
    assert again.choices[0].text == r.choices[0].text  # greedy is deterministic
    seeded = [client.completions.create(model="tiny", prompt="Hi", max_tokens=10, temperature=1.0, seed=5,
                                        top_p=0.9, extra_body={"top_k": 40}).choices[0].text for _ in range(2)]
    assert seeded[0] == seeded[1]
    # ignore_eos: an unseeded sample may draw EOS before max_tokens, which would make the count vary
    two = client.completions.create(model="tiny", prompt="Hi", max_tokens=5, n=2, temperature=1.0,
                                    extra_body={"ignore_eos": True})
    assert sorted(c.index for c in two.choices) == [0, 1] and two.usage.completion_tokens == 10


def test_chat_uses_the_chat_template(client):
    r = client.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "Be brief."},
                                                               {"role": "user", "content": "Hello!"}],
                                       max_tokens=6, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == 6
    # the prompt went through the template: system + user + the assistant header
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_model_dir_of(r))
    text = tok.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}],
                                   tokenize=False, add_generation_prompt=True)
    assert r.usage.prompt_tokens == len(tok(text, add_special_tokens=False).input_ids)


def _model_dir_of(_r):
    cfg = _server().llm_config.remote().result()
    return cfg.model_source


def test_streaming_matches_the_whole_answer(client):
    whole = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "count"}],
                                           max_tokens=24, temperature=0).choices[0].message.content
    chunks = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "count"}],
                                                 max_tokens=24, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 24 and not chunks[-1].choices
    comp = list(client.completions.create(model="tiny", prompt="abc", max_tokens=5, stream=True))
    assert sum(1 for c in comp if c.choices[0].text) >= 1 and comp[-1].choices[0].finish_reason == "length"


def test_sse_wire_format(app):
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", app + "/v1/completions",
                      json={"model": "tiny", "prompt": "x", "max_tokens": 3, "stream": True}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            body = b"".join(r.iter_raw()).decode()
    events = [e for e in body.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert json.loads(events[0][6:])["object"] == "text_completion"


def test_concurrent_streams_interleave(client):
    """Two streams in flight at once both get tokens before either ends (one batch)."""
    order: list[int] = []
    lock = threading.Lock()

    def run(i):
        s = client.completions.create(model="tiny", prompt=f"story {i}", max_tokens=120, temperature=0.7,
                                      stream=True, extra_body={"ignore_eos": True})
        for c in s:
            if c.choices and c.choices[0].text:
                with lock:
                    order.append(i)

    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        list(ex.map(run, [0, 1]))
    first_end = min(len(order) - 1 - order[::-1].index(i) for i in (0, 1))
    assert {0, 1} <= set(order[:first_end]), "one stream finished before the other produced anything"


def test_client_disconnect_frees_the_batch_slot(app):
    h = _server()
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", app + "/v1/completions",
                      json={"model": "tiny", "prompt": "forever", "max_tokens": 1000, "stream": True,
                            "ignore_eos": True}) as r:
            it = r.iter_raw()
            next(it)
            assert h.engine_stats.remote().result()["running"] == 1
        # the connection is closed here, long before 200 tokens
    wait_for(lambda: h.engine_stats.remote().result()["running"] == 0, timeout_s=20,
             what="the aborted request to leave the batch")


def test_errors_have_openai_shape_and_the_replica_keeps_serving(app, client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model="tiny", prompt="x", temperature=9)
    with pytest.raises(openai.BadRequestError, match="maximum context length is 1024"):
        client.completions.create(model="tiny", prompt="hello " * 1100)
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="tiny", messages=[])
    with httpx.Client(timeout=30) as c:
        r = c.post(app + "/v1/chat/completions", content=b"{not json")
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == 400 and "malformed JSON" in err["message"] and err["type"] == "invalid_request_error"
        assert c.get(app + "/v1/nothing").status_code == 404
        assert c.get(app + "/v1/completions").status_code == 405
        assert c.get(app + "/v1/models/tiny").json()["id"] == "tiny"
    assert client.completions.create(model="tiny", prompt="still here", max_tokens=2).usage.completion_tokens == 2


@pytest.mark.parametrize("route,extra,param,inert", [
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 2}, "logprobs", {"logprobs": False, "top_logprobs": 0}),
    ("/v1/completions", {"logprobs": 1}, "logprobs", {"logprobs": None}),
    ("/v1/chat/completions", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
     "tools", {"tools": []}),
    ("/v1/chat/completions", {"response_format": {"type": "json_object"}}, "response_format",
     {"response_format": {"type": "text"}}),
    ("/v1/completions", {"presence_penalty": 0.5}, "presence_penalty", {"presence_penalty": 0}),
    ("/v1/completions", {"temperature": 9}, "temperature", None),
    ("/v1/completions", {"max_tokens": 0}, "max_tokens", None),
    ("/v1/completions", {"stop": 5}, "stop", None),
])
def test_what_the_server_does_not_do_is_refused_naming_the_parameter(app, route, extra, param, inert):
    """As vLLM's server: a parameter the engine cannot honour is a 400 whose `param` names it,
    never a 200 that ignored it; the values that ask for nothing (clients' defaults) pass."""
    chat = route.endswith("chat/completions")
    body = {"model": "tiny", "max_tokens": 2,
            **({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})}
    with httpx.Client(timeout=30) as c:
        r = c.post(app + route, json={**body, **extra})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param and param in r.json()["error"]["message"]
        if inert is not None:
            ok = c.post(app + route, json={**body, **inert})
            assert ok.status_code == 200, ok.text


def test_a_chat_message_with_an_unknown_role_is_refused(app):
    with httpx.Client(timeout=30) as c:
        r = c.post(app + "/v1/chat/completions",
                   json={"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert "wizard" in r.json()["error"]["message"]


def test_replica_metrics(app, client):
    client.completions.create(model="tiny", prompt="metrics", max_tokens=4, stream=True).close()
    client.completions.create(model="tiny", prompt="metrics", max_tokens=4)
    addr = _server().metrics_address.remote().result()
    assert addr
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    for name in ("ember_serve_llm_time_to_first_token_seconds_count", "ember_serve_llm_inter_token_latency_seconds",
                 "ember_serve_llm_generation_tokens_total", "ember_serve_llm_requests_running",
                 "ember_serve_llm_requests_waiting", "ember_serve_llm_kv_cache_usage",
                 "ember_serve_llm_tokens_per_second"):
        assert name in text, name
    ttft = [ln for ln in text.splitlines() if ln.startswith("ember_serve_llm_time_to_first_token_seconds_count")]
    assert float(ttft[0].split()[-1]) >= 1


def test_llm_server_alone_over_handle_and_http(serve_url, model_dir):
    cfg = {"model_loading_config": {"model_id": "solo", "model_source": model_dir}, "llm_engine": "torch"}
    h = serve.run(build_llm_deployment(cfg), name="solo", route_prefix="/solo")
    try:
        items = list(h.options(stream=True).completions.remote({"model": "solo", "prompt": "hi", "max_tokens": 3}))
        assert len(items) == 1 and items[0]["usage"]["completion_tokens"] == 3
        streamed = "".join(h.options(stream=True).chat.remote(
            {"model": "solo", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True}))
        assert streamed.endswith("data: [DONE]\n\n")
        with openai.OpenAI(base_url=serve_url + "/solo/v1", api_key="x", max_retries=0) as c:
            assert c.completions.create(model="solo", prompt="hi", max_tokens=2).usage.completion_tokens == 2
    finally:
        serve.delete("solo")


def _replica_threads(app_name):
    """The thread each replica of app_name runs its methods on (ServeReplica.stream_stats)."""
    import ember
    from ember.util import list_named_actors

    names = [a["name"] for a in list_named_actors(all_namespaces=True)
             if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{app_name}#")]
    return [ember.get(ember.get_actor(n, namespace="serve").stream_stats.remote(), timeout=60)["thread"]
            for n in names]


def test_llm_replica_runs_on_the_core_loop_only_over_the_engine_core(app, serve_url, model_dir):
    """LLMServer over the engine-core client never blocks its loop: its replica runs on the
    worker's core loop (no thread hop per request); with the engine's step loop in a thread of
    the replica it stays on the actor's loop (serve/_private/core_loop.py)."""
    assert _replica_threads("llm") == ["ember-core"]
    cfg = {"model_loading_config": {"model_id": "inthread", "model_source": model_dir}, "llm_engine": "torch",
           "engine_kwargs": {"engine_process": False}}
    serve.run(build_llm_deployment(cfg), name="inthread", route_prefix="/inthread")
    try:
        assert _replica_threads("inthread") == ["ember-actor-loop"]
        with openai.OpenAI(base_url=serve_url + "/inthread/v1", api_key="x", max_retries=0) as c:
            assert c.completions.create(model="inthread", prompt="hi", max_tokens=2).usage.completion_tokens == 2
    finally:
        serve.delete("inthread")


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="llm_configs is empty"):
        build_openai_app({"llm_configs": []})
    with pytest.raises(ValueError, match="invalid LLMConfig"):
        build_openai_app({"llm_configs": [{"model_loading_config": {"model_id": "x"}, "llm_engine": "nope"}]})
    with pytest.raises(ValueError, match="given twice"):
        cfg = {"model_loading_config": {"model_id": "x"}}
        build_openai_app({"llm_configs": [cfg, cfg]})
    time.sleep(0)


def test_two_models_behind_the_openai_ingress(serve_url, model_dir):
    """Several models: an OpenAiIngress routes by "model" to each LLMServer through handles;
    streams cross two hops and a disconnect still reaches the engine."""
    small = {"ray_actor_options": {"num_cpus": 0.25}}  # 3 replicas more on a 2-CPU cluster
    cfgs = [LLMConfig(model_loading_config={"model_id": m, "model_source": model_dir}, llm_engine="torch",
                      engine_kwargs={"max_num_seqs": 4}, deployment_config=small) for m in ("m1", "m2")]
    serve.run(build_openai_app({"llm_configs": cfgs, "ingress_deployment_config": small}), name="two",
              route_prefix="/two")
    try:
        with openai.OpenAI(base_url=serve_url + "/two/v1", api_key="x", max_retries=0, timeout=60) as c:
            assert sorted(m.id for m in c.models.list().data) == ["m1", "m2"]
            a = c.completions.create(model="m1", prompt="same", max_tokens=6, temperature=0)
            b = c.completions.create(model="m2", prompt="same", max_tokens=6, temperature=0)
            assert a.choices[0].text == b.choices[0].text  # same weights, different deployments
            chunks = list(c.chat.completions.create(model="m2", messages=[{"role": "user", "content": "x"}],
                                                    max_tokens=8, stream=True, extra_body={"ignore_eos": True}))
            assert chunks[-1].choices[0].finish_reason == "length"
            with pytest.raises(openai.NotFoundError):
                c.completions.create(model="m3", prompt="x")
        h = serve.get_deployment_handle("LLMServer:m1", "two")
        with httpx.Client(timeout=60) as hc:
            with hc.stream("POST", serve_url + "/two/v1/completions",
                           json={"model": "m1", "prompt": "go", "max_tokens": 1000, "stream": True,
                                 "ignore_eos": True}) as r:
                it = r.iter_raw()  # (a dropped iterator would close the response)
                next(it)
                assert h.engine_stats.remote().result()["running"] == 1
        wait_for(lambda: h.engine_stats.remote().result()["running"] == 0, timeout_s=20,
                 what="the aborted request to leave m1's batch")
    finally:
        serve.delete("two")


def test_engine_core_crash_replaces_the_replica_and_delete_leaves_no_core(serve_url, model_dir):
    """The torch engine's core process (engine_process, the default) under Serve: a child of the
    replica; killing it fails the stream in flight with an error event (no hang), the replica
    turns unhealthy and is replaced; deleting the app leaves no core process behind."""
    psutil = pytest.importorskip("psutil")
    from ember.serve.llm._internal.engine_core import MARKER

    cfg = {"model_loading_config": {"model_id": "core", "model_source": model_dir}, "llm_engine": "torch",
           "deployment_config": {"health_check_period_s": 0.5, "ray_actor_options": {"num_cpus": 0.25}}}
    h = serve.run(build_llm_deployment(cfg), name="core", route_prefix="/core")
    try:
        pid = h.engine_stats.remote().result()["core_pid"]
        assert MARKER in psutil.Process(pid).cmdline()
        assert "ember._private" in " ".join(psutil.Process(pid).parent().cmdline())  # a worker (the replica)
        with httpx.Client(timeout=30) as hc:
            with hc.stream("POST", serve_url + "/core/v1/completions",
                           json={"model": "core", "prompt": "go", "max_tokens": 1000, "stream": True,
                                 "ignore_eos": True}) as r:
                it = r.iter_text()
                body = next(it)
                psutil.Process(pid).kill()
                t0 = time.monotonic()
                body += "".join(it)
                assert time.monotonic() - t0 < 20
        assert '"code": 500' in body and "engine core process" in body and body.endswith("data: [DONE]\n\n")
        wait_for(lambda: h.engine_stats.remote().result()["core_pid"] not in (pid, None), timeout_s=60,
                 what="a new replica with a new engine core")
        new = h.engine_stats.remote().result()["core_pid"]
        with openai.OpenAI(base_url=serve_url + "/core/v1", api_key="x", max_retries=2) as c:
            assert c.completions.create(model="core", prompt="hi", max_tokens=2).usage.completion_tokens == 2
    finally:
        serve.delete("core")
    wait_for(lambda: process_gone(pid) and process_gone(new), timeout_s=30, what="the engine cores to exit with their replicas")
