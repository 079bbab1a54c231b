"""Driving the dashboard in a real browser (Debian's chromium + chromium-driver, headless,
selenium), shared by the integration test (`ember start`) and the e2e test (compose).

Without chromium/chromedriver a test module calls `skip_without_browser()`, which skips naming
what is missing unless EMBER_TEST_REQUIRE_BROWSER=1 (set by .ci/run, which installs both)
makes that a failure."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def skip_without_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing and os.environ.get("EMBER_TEST_REQUIRE_BROWSER") != "1":
        pytest.skip(f"no browser for the dashboard test: {missing} missing (apt-get install chromium "
                    "chromium-driver)", allow_module_level=True)


def start_browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    b = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    b.set_page_load_timeout(30)
    return b


def keep_screenshots(shots: Path, name: str) -> None:
    print(f"\ndashboard screenshots: {shots}")
    keep = os.environ.get("EMBER_TEST_ARTIFACTS")  # CI: a directory that outlives pytest's tmp dirs
    if keep:
        shutil.copytree(shots, os.path.join(keep, name), dirs_exist_ok=True)


def sign_in(browser: Any, url: str, token: str, shots: Path) -> None:
    """A browser without the cookie gets the login form (dashboard auth.py); a wrong token is
    refused on the page, the cluster's token sets the cookie every later request carries."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    for attempt, expect_error in (("not-the-token", True), (token, False)):
        browser.get(f"{url}/")
        field = WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.NAME, "token"))[0]
        field.send_keys(attempt)
        field.submit()
        if expect_error:
            WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".err"))
    WebDriverWait(browser, 30).until(lambda b: not b.find_elements(By.NAME, "token"))
    assert any(c["name"] == "ember-authentication-token" and c["httpOnly"] for c in browser.get_cookies())
    browser.save_screenshot(str(shots / "signed-in.png"))


def visit(browser: Any, url: str, shots: Path, route: str, ready_css: str, name: str) -> None:
    """Opens a page, waits for an element that only a rendered page has, saves a screenshot."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{url}/#/{route}")
    WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ready_css) or
                                     b.find_elements(By.ID, "page-error"))
    errors = browser.find_elements(By.ID, "page-error")
    assert not errors, f"{route}: {errors[0].text}"
    browser.save_screenshot(str(shots / f"{name}.png"))


def wait_text(browser: Any, css: str, predicate: Any, timeout_s: float = 60) -> str:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def check(b: Any) -> Any:
        els = b.find_elements(By.CSS_SELECTOR, css)
        return els and predicate(els[0].text)

    return str(stable(lambda: WebDriverWait(browser, timeout_s, poll_frequency=0.3, ignored_exceptions=[
        StaleElementReferenceException]).until(check) and browser.find_element(By.CSS_SELECTOR, css).text))


def stable(action: Any, tries: int = 5) -> Any:
    """Runs a step that reads or clicks elements again if a page refresh replaced them meanwhile
    (pages re-render their tables every few seconds)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for i in range(tries):
        try:
            return action()
        except StaleElementReferenceException:
            if i == tries - 1:
                raise
            time.sleep(0.2)
    return None
