"""The HTML report in a real browser: headless Chromium (Debian packages chromium and
chromium-driver, installed by scripts/install-browser.sh, which scripts/test.sh runs) opens
report.html from disk, every plot renders, and the page logs no JavaScript error.

A screenshot is saved to the test's tmp folder, and also to ``$COSEARCH_SCREENSHOT`` when set
(``experiments/results/report_screenshot.png`` was made that way). Missing Chromium fails the
test: it is part of CI, not optional.
"""
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from _studies import built_report

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def _find(*names: str) -> str | None:
    for n in names:
        p = shutil.which(n) or (f"/usr/bin/{n}" if os.access(f"/usr/bin/{n}", os.X_OK) else None)
        if p:
            return p
    return None


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = _find("chromium", "chromium-browser"), _find("chromedriver")
    if not chromium or not driver_path:
        pytest.fail("headless Chromium is missing: run scripts/install-browser.sh (Debian packages chromium, chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed; install the test extras: pip install -e '.[test]'")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download a driver or browser
    os.environ.setdefault("SE_AVOID_STATS", "true")
    profile = tempfile.mkdtemp(prefix="cosearch-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument("--window-size=1280,1000")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(drv, script: str, want, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = drv.execute_script(script)
        if got == want:
            return got
        time.sleep(0.2)
    return got


def test_report_renders_without_javascript_errors(browser, tmp_path):
    built = built_report()
    expected = built["plots"]
    browser.get(built["html"].resolve().as_uri())
    assert browser.current_url.startswith("file://")
    rendered = _wait(browser, "return document.querySelectorAll('.js-plotly-plot .plot-container').length", len(expected))
    assert rendered == len(expected), f"{rendered} of {len(expected)} plots rendered"
    # every expected plot div holds a rendered plotly graph with SVG layers and drawn data
    state = browser.execute_script("""
        return arguments[0].map(id => {
            const el = document.getElementById(id);
            return el === null ? null : {
                plotly: el.classList.contains('js-plotly-plot') && el._fullLayout !== undefined,
                svgs: el.querySelectorAll('.main-svg').length,
                traces: (el._fullData || []).length,
                marks: el.querySelectorAll('.point, path.bar, .scatterlayer .trace path').length,
                height: el.getBoundingClientRect().height,
            };
        });""", expected)
    for div, s in zip(expected, state):
        assert s is not None, f"#{div} missing"
        assert s["plotly"] and s["svgs"] >= 2 and s["traces"] >= 1 and s["marks"] > 0 and s["height"] > 200, (div, s)
    assert browser.execute_script("return typeof Plotly") == "object"
    assert browser.execute_script("return document.querySelectorAll('table.budget tbody tr').length") >= 2
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert not errors, f"JavaScript errors: {errors}"
    # full-page screenshot
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(int(height) + 40, 12000))
    time.sleep(0.5)
    shot = tmp_path / "report_screenshot.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    target = os.environ.get("COSEARCH_SCREENSHOT")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)


def test_javascript_errors_are_caught(browser, tmp_path):
    """The error check above is not vacuous: a page that throws is reported in the browser log."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    browser.get_log("browser")  # drain
    browser.get(page.as_uri())
    time.sleep(0.3)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert any("undefinedFunction" in e["message"] for e in errors), errors
