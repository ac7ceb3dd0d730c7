"""The receipts table at a desktop's and a phone's width, in headless Chromium, over a
hand-built store holding a Claude Code session's receipts as the gateway writes them
(repairs and churn named per turn): issue 31 found that table 1,280 px wide and more.

No llama-server: the dashboard reads only the store. The live session in a browser is
tests/gateway/test_dashboard_browser.py; this one skips the same way without Chromium.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from sakur4.gateway.app import create_dashboard_app
from sakur4.receipts import Receipt, record_harness, write_receipt
from sakur4.settings import Settings
from sakur4.store import open_store
from sakur4.store.projects import add_project

SESSION = "claude-4d5b6d9a-1f2e-4c4b-8a69-0e1d2c3b4a59"
# The table's width past its box, in CSS pixels (0 or less: it fits).
OVERFLOW = """
var t = document.getElementById("receipts");
return t.scrollWidth - t.parentElement.clientWidth;
"""

NARROWEST_CELL = """
var cells = document.querySelectorAll("#receipts tr.receipt td");
return Math.min.apply(null, Array.from(cells).map(c => c.getBoundingClientRect().width));
"""


def _claude_turn(turn: int, project_id: int) -> Receipt:
    repairs = [
        {"kind": "billing-header", "saved_predicted": 0, "saved_confirmed": 0},
        {"kind": "moved-system-reminder", "saved_predicted": 12_500, "saved_confirmed": 12_345},
    ]
    return Receipt(
        project_id=project_id,
        session=SESSION,
        turn=turn,
        context_window=131_072,
        prompt_tokens=98_000 + 1_500 * turn,
        profile="cache-first",
        profile_reason="probe: checkpoint source checkpoint-ring",
        verdict="reclaimed",
        cache_verdict="full-re-prefill" if turn % 3 == 0 else "reused",
        requested_cut=88_000,
        chosen_cut=87_654,
        server_cached=0 if turn % 3 == 0 else 96_000,
        server_processed=99_500 if turn % 3 == 0 else 3_500,
        prefill_ms=123_456.0,
        detail={"repairs": repairs, "churn": [{"kind": "tool-list-changed"}]},
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (binary and driver_path):
        pytest.skip("headless Chromium unavailable (Debian's chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[str]:
    store = open_store(tmp_path / "store.db")
    project = add_project(store, tmp_path)
    record_harness(store, project.id, SESSION, "Claude Code 2.1.332")
    for turn in range(1, 7):
        write_receipt(store, _claude_turn(turn, project.id))
    store.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    settings = Settings.load(store=tmp_path / "store.db", project=tmp_path, backend=None)
    server = uvicorn.Server(
        uvicorn.Config(create_dashboard_app(settings), host="127.0.0.1", port=port)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive(), "the dashboard did not start"
        assert time.monotonic() < deadline, "the dashboard did not start in 60 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/sakur4/projects/{project.id}/sessions/{quote(SESSION)}"
    server.should_exit = True
    thread.join(timeout=30)


def test_the_receipts_table_fits_a_desktop_and_a_phone(browser: Any, page: str) -> None:
    try:
        for width in (1280, 390):
            browser.set_window_size(width, 900)
            browser.get(page)
            assert browser.find_elements(By.CSS_SELECTOR, "#receipts tr.receipt")
            assert browser.execute_script(OVERFLOW) <= 0, width
            assert browser.execute_script("return document.documentElement.scrollWidth") <= (
                browser.execute_script("return window.innerWidth")
            )
        # On the phone each cell is a labelled line of its own, not a column squeezed to
        # a few characters a line.
        assert browser.execute_script(NARROWEST_CELL) >= 200
    finally:
        browser.set_window_size(1280, 900)
