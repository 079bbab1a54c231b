"""The dashboard of the compose cluster in a real browser (headless chromium, selenium): signed
in with the cluster's token through its login form, its overview shows both nodes, its actors
page an actor living on the worker node's container, and its logs page opens a worker's log
file from the worker node (read through that node's raylet)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dashboard_browser
import pytest
from dashboard_browser import keep_screenshots, sign_in, skip_without_browser, stable, start_browser, wait_text

from .conftest import DRIVER_PRELUDE, Cluster

skip_without_browser()

ACTOR = "compose-browser-actor"


@pytest.fixture(scope="module")
def live(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A detached actor and a task on the worker node, whose print lands in that node's logs."""
    out = cluster.exec_python("raylet-head", DRIVER_PRELUDE + f"""
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy
head = ember.get_runtime_context().get_node_id()
other = next(n["NodeID"] for n in ember.nodes() if n["Alive"] and n["NodeID"] != head)
pin = NodeAffinitySchedulingStrategy(other, soft=False)
@ember.remote
def shout():
    print("compose browser e2e line", flush=True)
@ember.remote
class Keeper:
    def where(self):
        return ember.get_runtime_context().get_node_id()
ember.get(shout.options(scheduling_strategy=pin).remote())
k = Keeper.options(name={ACTOR!r}, namespace="e2e", lifetime="detached", num_cpus=0,
                  scheduling_strategy=pin).remote()
print("RESULT", other, ember.get(k.where.remote()), [n["NodeID"] for n in ember.nodes() if n["Alive"]])
""")
    line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
    _, other, actor_node, alive = line.split(" ", 3)
    assert other == actor_node, line
    try:
        yield {"url": f"http://127.0.0.1:{cluster.dashboard_port}", "other": other,
               "alive": set(ast.literal_eval(alive)), "shots": tmp_path_factory.mktemp("compose-dashboard")}
    finally:
        cluster.exec_python("raylet-head", f"import ember\nember.init()\n"
                                           f"ember.kill(ember.get_actor({ACTOR!r}, namespace='e2e'))\n")


@pytest.fixture(scope="module")
def browser(cluster: Cluster, live: dict[str, Any]) -> Iterator[Any]:
    b = start_browser()
    sign_in(b, live["url"], cluster.token, live["shots"])
    yield b
    b.quit()
    keep_screenshots(live["shots"], "compose-dashboard-screenshots")


def _visit(browser: Any, live: dict[str, Any], route: str, css: str, name: str) -> None:
    dashboard_browser.visit(browser, live["url"], live["shots"], route, css, name)


def test_overview_shows_both_nodes(browser: Any, live: dict[str, Any]) -> None:
    from selenium.webdriver.common.by import By

    _visit(browser, live, "overview", "#nodes-table tbody tr[data-id]", "overview")
    assert wait_text(browser, "#nodes-alive .value", lambda t: t == "2", 30) == "2"
    rows = stable(lambda: {r.get_attribute("data-id") for r in
                           browser.find_elements(By.CSS_SELECTOR, "#nodes-table tbody tr[data-id]")})
    assert live["alive"] <= rows and live["other"] in rows


def test_actors_page_shows_the_actor_on_the_worker_node(browser: Any, live: dict[str, Any]) -> None:
    from selenium.webdriver.common.by import By

    _visit(browser, live, "actors", "#actors-table tr[data-id]", "actors")
    row = stable(lambda: next(r for r in browser.find_elements(By.CSS_SELECTOR, "#actors-table tr[data-id]")
                              if r.find_element(By.CSS_SELECTOR, ".actor-name").text == ACTOR))
    assert stable(lambda: row.find_element(By.CSS_SELECTOR, ".actor-state").text) == "ALIVE"
    assert stable(lambda: row.find_element(By.CSS_SELECTOR, ".actor-class").text) == "Keeper"


def test_logs_page_opens_a_worker_log_of_the_worker_node(browser: Any, live: dict[str, Any]) -> None:
    from selenium.webdriver.common.by import By

    _visit(browser, live, "logs", "#logs-table a.log-link", "logs")
    texts = []
    names = stable(lambda: [a.get_attribute("data-name") for a in
                            browser.find_elements(By.CSS_SELECTOR, "#logs-table a.log-link")
                            if a.get_attribute("data-node") == live["other"]
                            and (a.get_attribute("data-name") or "").startswith("worker-")
                            and a.get_attribute("data-name").endswith(".out")])
    for name in names:  # the worker that ran the task is one of the node's workers
        stable(lambda n=name: next(a for a in browser.find_elements(By.CSS_SELECTOR, "#logs-table a.log-link")
                                   if a.get_attribute("data-node") == live["other"]
                                   and a.get_attribute("data-name") == n).click())
        wait_text(browser, "#log-name", lambda t, n=name: t.startswith(n), 30)
        texts.append(stable(lambda: browser.find_element(By.ID, "log-text").text))
        if any("compose browser e2e line" in t for t in texts):
            break
    assert any("compose browser e2e line" in t for t in texts), texts
    browser.save_screenshot(str(Path(live["shots"]) / "log-file.png"))
