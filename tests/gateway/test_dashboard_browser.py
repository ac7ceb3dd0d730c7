"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by scripts/setup-tests) driven by Selenium, against a real
gateway in front of the real llama-server after a short scripted session.

What a person would check: one chart point per turn, the figures on the page equal
to the receipts in the store, a new turn appearing without a reload, a fold opening,
a receipt row opening, the chart labelled, the tables headed, the colours' contrast,
and a narrow screen. A screenshot is written as an artefact and its path printed.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from fixtures_llama import REAL_SETTINGS, locate_backend
from replayed import replay
from sakur4.anchors import pin_anchor
from sakur4.backends.launcher import LlamaServer, ServerFlags
from sakur4.demo.scenario import TOOLS, Request, build_session
from sakur4.episodes import open_fold
from sakur4.receipts import Receipt, list_receipts, receipt_row, reprefilled_tokens
from sakur4.store import Store, open_store
from sakur4.store.projects import Project, ensure_project

pytestmark = pytest.mark.backend

SESSION = "dashboard-session"
WINDOW = 2048
# The fourth call crosses the trigger (a cut, folds); the fifth is the live one.
FIRST_CALLS = 4
STARTUP = 600.0  # seconds llama-server may take to answer its health check
WAIT = 60.0  # seconds a live update may take on a loaded machine (the page polls each 1 s)
# An element read while the poll swaps the page in: read again at the next try.
STALE = (StaleElementReferenceException,)


def _chrome_paths(require: bool) -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    message = (
        "headless Chromium unavailable: Debian's chromium and chromium-driver are not "
        "installed (scripts/setup-tests installs them with apt-get where it runs as root)"
    )
    if require:
        pytest.fail(message + " (--require-backend)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    binary, driver_path = _chrome_paths(bool(request.config.getoption("--require-backend")))
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    # Both paths given: Selenium Manager never runs, so nothing is downloaded.
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@dataclass
class Session:
    url: str
    store: Store
    project: Project
    requests: list[Request]
    client: openai.OpenAI
    sent: int = 0

    def send(self, count: int = 1) -> None:
        """The scripted session's next ``count`` calls, through the openai SDK."""
        for request in self.requests[self.sent : self.sent + count]:
            if request.pin:
                pin_anchor(self.store, self.project.id, request.pin, priority=10)
            kwargs: dict[str, Any] = {
                "model": "any",
                "messages": request.messages,
                "max_tokens": 2,
                "tools": TOOLS,
                "temperature": 0,
            }
            if self.sent % 2:
                assert list(self.client.chat.completions.create(stream=True, **kwargs))
            else:
                assert self.client.chat.completions.create(**kwargs).choices
            self.sent += 1

    def receipts(self) -> list[Receipt]:
        return list_receipts(self.store, self.project.id, session=SESSION, limit=1000)


@pytest.fixture(scope="module")
def small_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """A ring server with a 2,048-token window: a few short turns cross the trigger,
    so the session has a cut and folds to show, in seconds of prefill."""
    binary, model = locate_backend(
        REAL_SETTINGS, require=bool(request.config.getoption("--require-backend"))
    )
    logs = tmp_path_factory.mktemp("llama-dashboard")
    flags = ServerFlags(ctx=WINDOW, checkpoint_min_step=256, cache_ram=0)
    # A machine loaded by other work can take minutes to load even this model.
    server = LlamaServer(
        binary,
        model,
        flags,
        log_path=logs / "server.log",
        die_with_parent=True,
        startup_timeout=STARTUP,
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def session(small_server: LlamaServer, module_gateways: Any) -> Iterator[Session]:
    gw = module_gateways.start(small_server.url, checkpoint_min_step=256)
    store = open_store(gw.store)
    try:
        with openai.OpenAI(
            base_url=gw.url + "/v1",
            api_key="unused",
            max_retries=0,
            default_headers={"X-Sakur4-Session": SESSION},
        ) as client:
            s = Session(
                gw.url,
                store,
                ensure_project(store, gw.project),
                replay(build_session(turns=3, file_chars=1800)),
                client,
            )
            s.send(FIRST_CALLS)
            yield s
    finally:
        store.close()


def _page(browser: Any, session: Session) -> str:
    browser.get(session.url + "/sakur4/")
    link = browser.find_element(By.LINK_TEXT, SESSION)
    href = str(link.get_attribute("href"))
    link.click()
    assert browser.current_url == href
    return href


def _points(browser: Any) -> list[int]:
    # Read in one script: element by element, the poll could swap the chart in between
    # (a StaleElementReferenceException in CI under load).
    values = browser.execute_script(
        "return Array.from(document.querySelectorAll('#tokens-chart circle.point'))"
        ".map(p => p.getAttribute('data-prompt-tokens'));"
    )
    return [int(str(v)) for v in values]


def _check_figures(browser: Any, receipts: list[Receipt]) -> None:
    """Every figure on the page is the store's."""
    assert _points(browser) == [r.prompt_tokens for r in receipts]
    rows = browser.find_elements(By.CSS_SELECTOR, "#receipts tr.receipt")
    assert len(rows) == len(receipts)
    for row, r in zip(rows, receipts, strict=True):
        assert row.get_attribute("data-receipt") == str(r.id)
        cells = {
            str(td.get_attribute("data-col")): td.get_attribute("textContent")
            for td in row.find_elements(By.TAG_NAME, "td")
        }
        assert cells == receipt_row(r)
    figure = {
        str(e.get_attribute("data-figure")): str(e.get_attribute("textContent"))
        for e in browser.find_elements(By.CSS_SELECTOR, "#totals .figure")
    }
    assert figure["turns"] == f"{len(receipts):,}"
    assert figure["reprefilled"] == f"{sum(reprefilled_tokens(r) for r in receipts):,}"
    assert figure["reused"] == f"{sum(r.server_cached or 0 for r in receipts):,}"


def test_the_page_follows_the_session_live(
    browser: Any, session: Session, tmp_path_factory: pytest.TempPathFactory, request: Any
) -> None:
    href = _page(browser, session)
    receipts = session.receipts()
    assert len(receipts) == session.sent == FIRST_CALLS
    assert all(r.cache_verdict != "unverifiable" for r in receipts), [r.as_dict() for r in receipts]
    _check_figures(browser, receipts)
    # The JSON the page polls says the same (the endpoint is the page's own).
    api = browser.find_element(By.ID, "live").get_attribute("data-api")
    assert api == href.replace(session.url + "/sakur4/", "/sakur4/api/", 1)

    # A new turn appears without a reload: a mark left in the page survives it.
    browser.execute_script("window.__sakur4_mark = 'before';")
    session.send(1)
    WebDriverWait(browser, WAIT, ignored_exceptions=STALE).until(
        lambda b: len(_points(b)) == FIRST_CALLS + 1
    )
    assert browser.execute_script("return window.__sakur4_mark;") == "before"
    assert browser.current_url == href
    # The receipt may be completed a moment after the turn: wait for the page to settle
    # on the store's figures.
    WebDriverWait(browser, WAIT, ignored_exceptions=STALE).until(
        lambda b: (
            b.find_element(By.ID, "live").get_attribute("data-version")
            == json.loads(_get_json(session.url + api))["version"]
        )
    )
    _check_figures(browser, session.receipts())

    # A receipt row opens on its steps, cut, divergence and repairs.
    stepped = next((r for r in session.receipts() if r.steps), None)
    assert stepped is not None, "the script folds an answered tool result early"
    details = browser.find_element(By.ID, f"receipt-{stepped.id}")
    details.find_element(By.TAG_NAME, "summary").click()
    assert details.get_attribute("open") is not None
    assert f"steps ({len(stepped.steps)})" in details.text
    assert "divergence" in details.text

    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(int(height) + 140, 6000))
    shot = tmp_path_factory.getbasetemp() / "dashboard.png"
    assert browser.save_screenshot(str(shot))
    browser.set_window_size(1280, 900)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    reporter.write_line(f"dashboard screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def _get_json(url: str) -> str:
    return httpx.get(url, timeout=30).text


def test_a_fold_opens_its_full_content(browser: Any, session: Session) -> None:
    _page(browser, session)
    links = browser.find_elements(By.CSS_SELECTOR, "#episodes a.fold")
    assert links, "no folded episode on the page"
    episode = int(re.sub(r"\D", "", links[0].text))
    links[0].click()
    shown = json.loads(browser.find_element(By.TAG_NAME, "body").text)
    assert shown["id"] == episode
    assert shown["content"] == open_fold(session.store, session.project.id, episode).content
    browser.back()


def _luminance(rgb: tuple[float, float, float]) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2.1 contrast ratio of two CSS ``rgb(...)`` colours."""

    def parse(css: str) -> tuple[float, float, float]:
        r, g, b = (float(x) for x in re.findall(r"[\d.]+", css)[:3])
        return r, g, b

    hi, lo = sorted((_luminance(parse(a)), _luminance(parse(b))), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


COLOUR_OF = """
const [selector, property] = arguments;
return Array.from(document.querySelectorAll(selector)).slice(0, 20).map(e => {
  let bg = e;
  let back = 'rgb(255, 255, 255)';
  while (bg) {  // the first opaque background behind the element
    const c = getComputedStyle(bg).backgroundColor;
    if (c && c !== 'transparent' && !c.startsWith('rgba(0, 0, 0, 0)')) { back = c; break; }
    bg = bg.parentElement;
  }
  return [getComputedStyle(e)[property], back];
});
"""


RECEIPTS_OVERFLOW = """
var t = document.getElementById("receipts");
return t.scrollWidth - t.parentElement.clientWidth;
"""


def test_the_page_is_labelled_and_legible_at_any_width(browser: Any, session: Session) -> None:
    _page(browser, session)
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == "en"
    chart = browser.find_element(By.ID, "tokens-chart")
    assert chart.get_attribute("role") == "img"
    for label in str(chart.get_attribute("aria-labelledby")).split():
        assert browser.find_element(By.ID, label).get_attribute("textContent").strip()
    for table in browser.find_elements(By.TAG_NAME, "table"):
        assert table.find_element(By.TAG_NAME, "caption").text.strip()
        heads = table.find_elements(By.CSS_SELECTOR, "thead th")
        assert heads
        assert {h.get_attribute("scope") for h in heads} == {"col"}
    # Text against its background: 4.5:1; the chart's marks against the page: 3:1.
    for selector in ("body", "a", "th", "td", "caption", ".legend li", ".summary", "dt"):
        for colour, back in browser.execute_script(COLOUR_OF, selector, "color"):
            assert contrast(colour, back) >= 4.5, (selector, colour, back)
    for selector, prop in (
        (".bar.reused", "fill"),
        (".bar.processed", "fill"),
        (".point", "fill"),
        (".event", "fill"),
        (".limit.trigger", "stroke"),
        (".limit.target", "stroke"),
        (".hatch-line", "stroke"),
    ):
        found = browser.execute_script(COLOUR_OF, selector, prop)
        assert found or selector in (".event", ".bar.processed"), selector
        for colour, _ in found:
            assert contrast(colour, "rgb(255, 255, 255)") >= 3.0, (selector, colour)

    # The receipts table fits its box, no sideways scrolling (issue 31: it overflowed at
    # 1,280 px), at the desktop width and at a phone's.
    assert browser.execute_script(RECEIPTS_OVERFLOW) <= 0
    # A phone's width: nothing but the tables' own scrolling boxes scrolls sideways.
    browser.set_window_size(390, 844)
    try:
        assert browser.execute_script(RECEIPTS_OVERFLOW) <= 0
        width = browser.execute_script("return window.innerWidth")
        assert width <= 400
        assert browser.execute_script("return document.documentElement.scrollWidth") <= width
        box = chart.rect
        assert 0 < box["width"] <= width
        assert box["height"] > 100
        assert browser.find_element(By.CSS_SELECTOR, "#receipts tr.receipt").is_displayed()
    finally:
        browser.set_window_size(1280, 900)
