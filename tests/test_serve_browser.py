"""`symcalc serve` in a real browser: headless Chromium driven by selenium loads the page, types
a question, sees the answer change, submits a bad value and sees the error.

Needs Debian's chromium and chromium-driver (.ci/run installs them): skipped without them,
unless SYMCALC_REQUIRE_BROWSER is set (as .ci/run does), when a missing browser is a failure.
Every wait is for a condition, with a generous timeout: nothing here depends on the machine's
speed. With SYMCALC_SCREENSHOTS=DIR the page is saved there as page.png and page_error.png.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="symcalc serve needs the serve extra (pip install '.[test]')")
WAIT = 120.0        # seconds: a cold plan on a busy machine, far more than it needs


def _browser() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    if os.environ.get("SYMCALC_REQUIRE_BROWSER"):
        pytest.fail("chromium and chromedriver are required (apt-get install chromium chromium-driver)")
    pytest.skip("chromium or chromedriver not installed (apt-get install chromium chromium-driver); CI requires them")


@contextlib.contextmanager
def _serving(env: dict | None = None):
    """``symcalc serve`` on a free port, in its own process (with ``env`` when given), until the
    block ends; yields its URL once it answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "symcalc", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + WAIT
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"symcalc serve did not start: {proc.stdout.read() if proc.stdout else ''}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture(scope="module")
def server():
    with _serving() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    chromium, driver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1100"):
        options.add_argument(arg)
    b = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    yield b
    b.quit()


def _type(browser, element_id: str, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = browser.find_element(By.ID, element_id)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)


def _shot(browser, name: str) -> None:
    folder = os.environ.get("SYMCALC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / name))


def test_the_page_answers_as_you_type_and_shows_errors(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    text = lambda element_id: browser.find_element(By.ID, element_id).text   # noqa: E731
    browser.get(server)
    # the question the page opens with: MFU of 7B at 150k token/s on 64 GPUs of 989 TFLOP/s
    wait.until(lambda b: text("answer").startswith("mfu = "))
    first = text("answer")
    assert first.startswith("mfu = 9.9") and "%" in first
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#derivation .math svg"))     # MathJax typeset it
    assert text("maths-note") == "Derivations typeset by MathJax served from this machine."
    # twice the GPUs for the same throughput: half the MFU, as soon as the typing pauses
    _type(browser, "pairs", "n_params=7e9 tokens_per_second=150000 token/s n_gpus=128 peak_flops=989 TFLOP/s")
    wait.until(lambda b: text("answer") != first and text("answer").startswith("mfu = "))
    assert text("answer").startswith("mfu = 4.97")
    # the layout: memory and step time of llama3_8b on 64 H100s, and the best layouts
    wait.until(lambda b: text("layout-headline") if b.find_elements(By.ID, "layout-headline") else False)
    assert "GB per GPU" in text("layout-headline") and "model_state_memory" in text("layout-out")
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#top-out tbody tr"))
    _shot(browser, "page.png")
    # a bad value: the server's one-line error, in the page
    _type(browser, "pairs", "n_params=7e9x tokens_per_second=150000 token/s n_gpus=128 peak_flops=989 TFLOP/s")
    wait.until(lambda b: b.find_element(By.ID, "solve-error").is_displayed())
    assert text("solve-error") == "error: n_params: unknown unit 'x' in '7e9x'"
    assert text("answer") == ""
    _shot(browser, "page_error.png")
    # and fixing it brings the answer back
    _type(browser, "pairs", "n_params=7e9 tokens_per_second=150000 token/s n_gpus=128 peak_flops=989 TFLOP/s")
    wait.until(lambda b: text("answer").startswith("mfu = 4.97"))
    assert not browser.find_element(By.ID, "solve-error").is_displayed()
    # a serving question about the page's run says its fit, as the command line does: Llama 3 8B
    # at batch 512 and 8192 tokens keeps 512 x 8192 x 128 KiB = 550 GB of KV cache on one GPU
    browser.find_element(By.ID, "use-run").click()
    _type(browser, "target", "decode_tokens_per_second")
    _type(browser, "pairs", "batch_size=512")
    wait.until(lambda b: b.find_elements(By.ID, "fit") and text("answer").startswith("decode_tokens_per_second"))
    assert text("fit").startswith("DOES NOT FIT: serving_memory_per_gpu = ") and "(workload = serving)" in text("fit")
    # and the run it is about, as the command line's "run:" line says it: serving, the page's
    # model and hardware, and the page's tp = 1 read from its layout (where the pairs leave the
    # degree open: the answer had leaned on the default)
    assert text("run").startswith("run: serving of llama3_8b on ") and "tp = 1 (layout of the run)" in text("run")
    _shot(browser, "page_fit.png")
    # the run's step time asked in the solve box is the layout panel's: the same global batch (the
    # plan's default, the field left empty) and the options it chose (sequence parallelism, ...)
    import re
    _type(browser, "target", "step_time")
    _type(browser, "pairs", "")
    wait.until(lambda b: text("answer").startswith("step_time = "))
    panel = re.search(r"step ([\d.]+) s, ([\d.]+) GB per GPU", text("layout-headline"))
    asked = float(re.search(r"step_time = ([\d.]+) s", text("answer")).group(1))
    assert panel and asked == pytest.approx(float(panel.group(1)), rel=2e-3)
    assert re.search(r"total_memory_per_gpu = ([\d.]+) GB", text("fit")).group(1) == panel.group(2)


def test_the_url_keeps_the_question_and_a_layout_that_does_not_fit_shows_its_memory(server, browser):
    """A question typed into the page is in its URL, and opening that URL asks it again. A layout
    opened from a URL that does not fit (Llama 3 70B on tp 8 alone, no recomputation) shows the
    closest layout's memory parts in the page's words, not the command line's flags: ZeRO-0 on
    8 GPUs keeps 16 B a parameter over 8 ranks, 70.55e9 x 16 / 8 = 141.1 GB of model states."""
    from urllib.parse import parse_qs, urlparse

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    text = lambda element_id: browser.find_element(By.ID, element_id).text   # noqa: E731
    browser.get(server + "?model=llama3_70b&tp=8&pp=1&dp=1&zero_stage=0&recompute=none")
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#layout-out .nofit-parts tbody tr"))
    parts = browser.find_element(By.CSS_SELECTOR, "#layout-out .nofit-parts").text
    assert "model_state_memory 141.1" in parts
    said = text("layout-out")
    assert "does not fit" in said or "nothing fits" in said
    assert "--" not in said and "tp8 pp1" in text("nofit-title")
    # the permalink: the question asked, in the URL as typed; the same URL answers it again
    _type(browser, "pairs", "n_params=7e9 tokens_per_second=150000 token/s n_gpus=32 peak_flops=989 TFLOP/s")
    wait.until(lambda b: "n_gpus=32" in parse_qs(urlparse(b.current_url).query).get("pairs", [""])[0])
    wait.until(lambda b: text("answer").startswith("mfu = 19.9"))      # 6 x 7e9 x 150000 / (32 x 989e12)
    asked = parse_qs(urlparse(browser.current_url).query)
    assert asked["model"] == ["llama3_70b"] and asked["tp"] == ["8"] and asked["target"] == ["mfu"]
    answer = text("answer")
    browser.get(browser.current_url)
    wait.until(lambda b: text("answer").startswith("mfu = "))     # the URL's pairs are in before the first ask
    assert text("answer") == answer and "n_gpus=32" in browser.find_element(By.ID, "pairs").get_attribute("value")
    assert browser.find_element(By.ID, "model").get_attribute("value") == "llama3_70b"


def test_without_mathjax_the_page_says_so_and_shows_no_raw_tex(browser, tmp_path):
    """A server where MathJax is not installed (an empty ``mathjax`` package first on the path,
    as after an install without the serve extra's wheel): the footer says the derivation is plain
    text, no TeX source is shown, and every step still shows its numbers."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    (tmp_path / "mathjax").mkdir()
    (tmp_path / "mathjax" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    wait = WebDriverWait(browser, WAIT)
    text = lambda element_id: browser.find_element(By.ID, element_id).text   # noqa: E731
    with _serving(env) as url:
        browser.get(url)
        wait.until(lambda b: text("answer").startswith("mfu = 9.9"))
        assert "MathJax is not installed" in text("maths-note")
        derivation = text("derivation")
        assert "\\(" not in derivation and "\\frac" not in derivation and "\\cdot" not in derivation
        assert not browser.find_elements(By.CSS_SELECTOR, "#derivation .math")
        steps = browser.find_elements(By.CSS_SELECTOR, "#derivation ol li")
        assert steps and all("→" in li.text and "=" in li.text.split("→")[1] for li in steps)


def test_the_best_layouts_read_as_ranks(server, browser):
    """Llama 3 70B on 64 H100s (tp 8 x dp 8 in the form): the page's best layouts state their
    key (the planned step in 1 % bands from the fastest) and show each band once, on its first
    row; the bands never go down the table and no two rows are the same layout."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    browser.get(server + "?model=llama3_70b&tp=8&pp=1&dp=8")
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#top-out tbody tr")) == 5)
    assert browser.find_element(By.ID, "top-key").text.startswith("ranked by planned step time in bands of 1 % from the fastest")
    cells = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
             for tr in browser.find_elements(By.CSS_SELECTOR, "#top-out tbody tr")]
    assert [c[0] for c in cells] == ["1", "2", "3", "4", "5"] and cells[0][1] == "+0-1 %"
    shown = [int(c[1][1:].split("-")[0]) for c in cells if c[1]]          # "+2-3 %" -> 2
    assert shown == sorted(shown) and len(shown) == len(set(shown))     # each band once, in order
    assert len({c[2] for c in cells}) == 5
