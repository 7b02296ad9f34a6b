"""The MLflow UI, seen in a real headless Chromium: the sweep's parent run expands to its nested trial runs.

Marked slow (a sweep, a UI server and a browser: about two minutes). Needs Debian's `chromium` and
`chromium-driver` (`apt-get install chromium chromium-driver`) and selenium (in the `test` extra):
run with `python -m pytest -m slow tests/search/tracking/test_ui_browser.py`.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.sweeps import NUM_TRIALS, free_port, get_json, store

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# Chromium's own connections (updates, sync, QUIC) fail on a closed network and slow every page down.
QUIET_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--no-proxy-server",
               "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1600,1000"]


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in QUIET_FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.mark.slow
def test_the_ui_lists_the_nested_trial_runs_under_the_sweep(finished_sweep, browser, tmp_path):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    folder, sweep_dir, _ = finished_sweep
    client, state = store(sweep_dir)
    trial_names = {r.info.run_name for r in client.search_runs(
        [state["experiment_id"]], filter_string=f"tags.`mlflow.parentRunId` = '{state['parent_run_id']}'")}
    assert len(trial_names) == NUM_TRIALS
    parent_name = client.get_run(state["parent_run_id"]).info.run_name
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "finesweep.search.cli", "ui", "sweep.yaml", "--port", str(port)],
                              cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = re.search(r"http://\S+", server.stdout.readline()).group(0)
        get_json(f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny", 90)
        browser.get(url)
        wait = WebDriverWait(browser, 60)
        parent_link = wait.until(shown.presence_of_element_located((By.PARTIAL_LINK_TEXT, parent_name)))
        # Nested runs are folded under their parent: the button in the parent's name cell unfolds them.
        cell = parent_link.find_element(By.XPATH, "./ancestor::span[contains(@class, 'ag-cell-value')][1]")
        cell.find_element(By.TAG_NAME, "button").click()
        wait.until(lambda driver: all(name in driver.page_source for name in trial_names))
        browser.save_screenshot(str(tmp_path / "runs.png"))
        listed = {link.text for link in browser.find_elements(By.PARTIAL_LINK_TEXT, "trial-")}
        assert listed == trial_names
    finally:
        server.terminate()
        server.wait(timeout=30)
