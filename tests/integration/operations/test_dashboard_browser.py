"""The dashboard in a real browser (Debian's chromium + chromium-driver, headless, driven by
selenium) against a live cluster (`ember start --head --dashboard-port 0`, metrics on, spans to
an ember_file directory) running tasks, an actor, a placement group and a Serve app. Each page is
checked against the cluster's state as the state API reports it (the tasks page filtered in the
page and laid out on its timeline); a job is submitted through the page's form and followed to
its log line; a trace is opened as a waterfall. The browser signs in first through the login
form the dashboard shows without its token cookie. Screenshots of every
page are saved under the test's tmp directory (printed at the end), the test's artifact, and
copied to $EMBER_TEST_ARTIFACTS/dashboard-screenshots when that is set.

Without chromium/chromedriver the test skips, naming what is missing, unless
EMBER_TEST_REQUIRE_BROWSER=1 (set by .ci/run, which installs both) makes that a failure.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import dashboard_browser
import psutil
import pytest
from dashboard_browser import keep_screenshots, sign_in, skip_without_browser, stable, start_browser, wait_text

from ember.util import state

skip_without_browser()

WORKLOAD = textwrap.dedent("""
    import sys, urllib.request
    import ember
    from ember import serve
    from ember.serve import api as serve_api
    from ember.util.placement_group import placement_group

    ember.init(address=sys.argv[1], log_to_driver=False)

    @ember.remote
    def square(x):
        return x * x

    print("SQUARES", sum(ember.get([square.remote(i) for i in range(20)])), flush=True)

    @ember.remote
    class Greeter:
        def hi(self):
            return "hi"

    g = Greeter.options(name="browser-actor").remote()
    ember.get(g.hi.remote())
    pg = placement_group([{"CPU": 1}], name="browser-pg")
    assert pg.wait(60)

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Hello:
        def __call__(self, request):
            return "hello from serve"

    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    serve.run(Hello.bind(), name="hello-app", route_prefix="/hello")
    host, port = serve_api.proxy_address()
    for _ in range(3):
        body = urllib.request.urlopen(f"http://{host}:{port}/hello", timeout=30).read()
    print("READY", body.decode(), "PORT", port, flush=True)
    sys.stdin.read()  # until the test closes stdin
    serve.shutdown()
    ember.shutdown()
""")


def _free_port(n=1):
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n < 65535 and all(_is_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no free ports")


def _is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def ember_cli(env, *args, check=True):
    r = subprocess.run([sys.executable, "-m", "ember.scripts", *args], env=env, capture_output=True,
                       text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"ember {' '.join(args)} failed ({r.returncode}): {r.stdout}{r.stderr}")
    return r


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash-browser")
    env = dict(os.environ)
    env.update(EMBER_TEMP_DIR=str(tmp / "ember-tmp"), OTEL_TRACES_EXPORTER="ember_file",
               EMBER_TRACE_DIR=str(tmp / "spans"))
    gcs_port, metrics_port = _free_port(), _free_port(3)
    ember_cli(env, "start", "--head", "--port", str(gcs_port), "--num-cpus", "4", "--dashboard-port", "0",
              "--metrics-export-port", str(metrics_port))
    url = json.loads((tmp / "ember-tmp" / "ember_current_cluster").read_text())["dashboard_url"]
    gcs = f"127.0.0.1:{gcs_port}"
    driver = subprocess.Popen([sys.executable, "-c", WORKLOAD, gcs], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            line = driver.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("READY"):
                break
        assert lines and lines[-1].startswith("READY hello from serve"), "".join(lines) + driver.stderr.read()[-3000:]
        yield {"url": url, "gcs": gcs, "tmp": tmp, "shots": tmp_path_factory.mktemp("dashboard-screenshots"),
               "proxy_port": int(lines[-1].split()[-1])}
    finally:
        driver.stdin.close()
        try:
            driver.wait(60)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait(10)
        driver.stdout.close()
        driver.stderr.close()
        ember_cli(env, "stop", check=False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(
                str(tmp) in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])):
            time.sleep(0.1)


@pytest.fixture(scope="module")
def browser(live):
    from ember_common import auth

    b = start_browser()
    sign_in(b, live["url"], auth.load().token, live["shots"])
    yield b
    b.quit()
    keep_screenshots(live["shots"], "dashboard-screenshots")


def visit(browser, live, route, ready_css, name):
    dashboard_browser.visit(browser, live["url"], live["shots"], route, ready_css, name)


def test_overview_shows_nodes_and_resources(browser, live):
    from selenium.webdriver.common.by import By

    nodes = state.list_nodes(address=live["gcs"], filters=[("state", "=", "ALIVE")])
    visit(browser, live, "overview", "#nodes-table tbody tr[data-id]", "overview")
    assert browser.find_element(By.CSS_SELECTOR, "#nodes-alive .value").text == str(len(nodes))
    rows = browser.find_elements(By.CSS_SELECTOR, "#nodes-table tbody tr[data-id]")
    assert {r.get_attribute("data-id") for r in rows} == {n.node_id for n in nodes}
    assert "/ 4" in browser.find_element(By.CSS_SELECTOR, "#cpu-use .value").text
    assert "MiB" in browser.find_element(By.CSS_SELECTOR, "#store-use .value").text


def test_actors_page_shows_the_actor_and_its_state(browser, live):
    from selenium.webdriver.common.by import By

    actor = state.list_actors(address=live["gcs"], filters=[("name", "=", "browser-actor")])[0]
    visit(browser, live, "actors", f"#actors-table tr[data-id='{actor.actor_id}']", "actors")
    row = browser.find_element(By.CSS_SELECTOR, f"#actors-table tr[data-id='{actor.actor_id}']")
    assert row.find_element(By.CSS_SELECTOR, ".actor-name").text == "browser-actor"
    assert row.find_element(By.CSS_SELECTOR, ".actor-state").text == actor.state == "ALIVE"
    assert row.find_element(By.CSS_SELECTOR, ".actor-class").text == "Greeter"


def test_tasks_page_lists_filters_and_lays_out_tasks(browser, live):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    deadline = time.monotonic() + 30  # workers report their RUNNING about once a second
    while len(state.list_tasks(address=live["gcs"], filters=[("name", "=", "square"), ("state", "=", "FINISHED")],
                               limit=100)) < 20 and time.monotonic() < deadline:
        time.sleep(0.3)
    squares = state.list_tasks(address=live["gcs"], filters=[("name", "=", "square")], limit=100, detail=True)
    assert len(squares) == 20 and all(t.state == "FINISHED" and t.start_time_ms for t in squares)
    visit(browser, live, "tasks", "#tasks-table tbody tr[data-id]", "tasks")
    assert "FINISHED" in wait_text(browser, "#tasks-summary", lambda t: "tasks" in t)
    stable(lambda: browser.find_element(By.ID, "tasks-filter-name").send_keys("square"))
    Select(browser.find_element(By.ID, "tasks-filter-state")).select_by_value("FINISHED")
    browser.find_element(By.ID, "tasks-apply").click()
    assert wait_text(browser, "#tasks-count", lambda t: t.startswith("20 of 20"), 30)
    rows = stable(lambda: [(r.get_attribute("data-id"), r.find_element(By.CSS_SELECTOR, ".task-state").text)
                           for r in browser.find_elements(By.CSS_SELECTOR, "#tasks-table tbody tr[data-id]")])
    assert {i for i, _ in rows} == {t.task_id for t in squares} and {s for _, s in rows} == {"FINISHED"}
    bars = browser.find_elements(By.CSS_SELECTOR, "#tasks-timeline .task-bar")
    assert len(bars) == 20  # one bar per task on its worker's lane
    browser.save_screenshot(str(live["shots"] / "tasks-filtered.png"))
    Select(browser.find_element(By.ID, "tasks-filter-state")).select_by_value("FAILED")
    browser.find_element(By.ID, "tasks-apply").click()
    assert wait_text(browser, "#tasks-count", lambda t: t.startswith("0 of 0"), 30)
    one = squares[0]
    visit(browser, live, f"tasks/{one.task_id}", "#task-events-0 tbody tr", "task")
    assert browser.find_element(By.ID, "task-id").text == one.task_id
    events = browser.find_element(By.ID, "task-events-0").text
    assert all(s in events for s in ("PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING", "FINISHED")), events


def test_placement_groups_page(browser, live):
    from selenium.webdriver.common.by import By

    pg = state.list_placement_groups(address=live["gcs"], filters=[("name", "=", "browser-pg")])[0]
    visit(browser, live, "placement-groups", f"#pgs-table tr[data-id='{pg.placement_group_id}']", "placement-groups")
    row = browser.find_element(By.CSS_SELECTOR, f"#pgs-table tr[data-id='{pg.placement_group_id}']")
    assert "browser-pg" in row.text and "CREATED" in row.text and "CPU 1" in row.text


def test_serve_page_shows_the_app_and_its_route(browser, live):
    from selenium.webdriver.common.by import By

    visit(browser, live, "serve", "#serve-apps tr[data-id='hello-app']", "serve")
    row = browser.find_element(By.CSS_SELECTOR, "#serve-apps tr[data-id='hello-app']")
    assert row.find_element(By.CSS_SELECTOR, ".app-route").text == "/hello"
    assert "RUNNING" in row.text and "Hello" in row.text
    assert browser.find_element(By.ID, "serve-proxies").text.endswith(f":{live['proxy_port']}")
    replicas = state.list_actors(address=live["gcs"], filters=[("class_name", "=", "ServeReplica")])
    assert len(replicas) == 1 and replicas[0].state == "ALIVE"
    row = browser.find_element(By.CSS_SELECTOR, f"#serve-replicas tr[data-id='{replicas[0].actor_id}']")
    assert "hello-app#Hello" in row.text and "ALIVE" in row.text


def test_submit_a_job_from_the_page_and_read_its_log(browser, live):
    from selenium.webdriver.common.by import By

    visit(browser, live, "jobs", "#submit-form", "jobs")
    browser.find_element(By.ID, "submit-entrypoint").send_keys(
        "python -c \"import ember; ember.init(); print('browser job says', ember.get(ember.remote(lambda: 6 * 7).remote()))\"")
    browser.find_element(By.ID, "submit-id").send_keys("browser-job")
    browser.find_element(By.ID, "submit-button").click()
    assert wait_text(browser, "#job-id", lambda t: t == "browser-job", 30)
    status = wait_text(browser, "#job-status", lambda t: t in ("SUCCEEDED", "FAILED"), 90)
    logs = wait_text(browser, "#job-logs", lambda t: "browser job says" in t or status == "FAILED", 30)
    assert status == "SUCCEEDED", logs
    assert "browser job says 42" in logs
    browser.save_screenshot(str(live["shots"] / "job.png"))
    job = state.get_job("browser-job", address=live["gcs"])
    assert job.status == "SUCCEEDED" and job.type == "SUBMISSION"
    visit(browser, live, "jobs", "#jobs-table tr[data-id='browser-job']", "jobs-list")
    row = browser.find_element(By.CSS_SELECTOR, "#jobs-table tr[data-id='browser-job']")
    assert row.find_element(By.CSS_SELECTOR, ".job-status").text == "SUCCEEDED"


def test_logs_page_opens_a_log_file(browser, live):
    from selenium.webdriver.common.by import By

    visit(browser, live, "logs", "#logs-table a.log-link", "logs")
    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "#logs-table a.log-link")
                if a.text.startswith("job-driver-browser-job"))
    link.click()
    assert "browser job says 42" in wait_text(browser, "#log-text", lambda t: "browser job says" in t, 30)
    browser.save_screenshot(str(live["shots"] / "log-file.png"))


def test_metrics_page_charts_the_prometheus_endpoints(browser, live):
    from selenium.webdriver.common.by import By

    visit(browser, live, "metrics", "#metrics-table tbody tr", "metrics")
    time.sleep(7)  # two more refreshes: the charts have points
    charts = browser.find_elements(By.CSS_SELECTOR, "canvas.chart")
    assert charts, "no charts"
    names = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#metric-target option")]
    assert any(n.startswith("raylet") for n in names) and "gcs" in names, names
    assert "ember_" in browser.find_element(By.ID, "metrics-table").text
    browser.save_screenshot(str(live["shots"] / "metrics-charts.png"))


def test_traces_page_opens_a_serve_request_as_a_waterfall(browser, live):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    visit(browser, live, "traces", "#traces-table a.trace-link", "traces")
    search = browser.find_element(By.ID, "trace-search")
    search.send_keys("GET /hello", Keys.RETURN)
    wait_text(browser, "#traces-table tbody tr[data-id]", lambda t: "proxy GET /hello" in t, 30)
    texts = stable(lambda: [(r.get_attribute("data-id"), r.text) for r in
                            browser.find_elements(By.CSS_SELECTOR, "#traces-table tbody tr[data-id]")])
    assert len(texts) == 3 and all("proxy GET /hello" in t for _, t in texts), texts
    trace_id = texts[0][0]
    stable(lambda: browser.find_element(By.CSS_SELECTOR, f"#traces-table tr[data-id='{trace_id}'] a.trace-link").click())
    assert wait_text(browser, "#trace-id", lambda t: t == trace_id, 30)
    spans = browser.find_elements(By.CSS_SELECTOR, "#waterfall tbody tr[data-id]")
    services = {s.text for s in browser.find_elements(By.CSS_SELECTOR, "#waterfall .span-service")}
    assert {"ember-serve-proxy", "ember-worker"} <= services, services
    names = [r.find_element(By.CSS_SELECTOR, "td.name").text for r in spans]
    assert names[0] == "proxy GET /hello" and any("handle_http" in n for n in names[1:]), names
    bars = browser.find_elements(By.CSS_SELECTOR, ".wf-span")
    assert len(bars) == len(spans)
    browser.save_screenshot(str(live["shots"] / "trace-waterfall.png"))
    assert len(list(live["shots"].glob("*.png"))) >= 10
