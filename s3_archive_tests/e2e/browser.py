"""Debian's Chromium driven by Selenium, for the tests that click through the Dagster UI as a person does.

Headless, with a new empty profile per browser and the flags without which this machine's closed network refuses
the browser's own connections (background networking, component updates, sync). Each step can leave a screenshot:
`$S3_ARCHIVE_TEST_ARTIFACTS/<test>/NN-<step>.png` (default: `test-artifacts/` in the repository, git-ignored).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1600,1000")


def artifacts_dir(test: str) -> Path:
    """Where a test's screenshots go (emptied first: they are the last run's)."""
    d = Path(os.environ.get("S3_ARCHIVE_TEST_ARTIFACTS", REPO / "test-artifacts")) / re.sub(r"[^\w.-]", "_", test)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def find_chromium() -> tuple[str, str]:
    """(chromium, chromedriver) on PATH; scripts/setup-chromium installs Debian's packages."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver:
        raise RuntimeError("no chromium or chromedriver on PATH; run scripts/setup-chromium (make setup does)")
    return browser, driver


@dataclass
class Browser:
    driver: WebDriver
    shots: Path
    taken: list[Path] = field(default_factory=list)

    def shot(self, step: str) -> Path:
        path = self.shots / f"{len(self.taken) + 1:02d}-{step}.png"
        self.driver.save_screenshot(str(path))
        self.taken.append(path)
        return path

    def wait(self, timeout: float = 30) -> WebDriverWait:
        return WebDriverWait(self.driver, timeout, poll_frequency=0.25)

    def visible(self, xpath: str, timeout: float = 30) -> WebElement:
        return self.wait(timeout).until(ec.visibility_of_element_located((By.XPATH, xpath)))

    def click(self, xpath: str, timeout: float = 30) -> WebElement:
        element = self.wait(timeout).until(ec.element_to_be_clickable((By.XPATH, xpath)))
        element.click()
        return element

    def text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text


def with_text(text: str, tag: str = "*") -> str:
    """XPath of the innermost `tag` elements whose visible text is `text`."""
    return f"//{tag}[normalize-space()={_literal(text)} and not(.//{tag}[normalize-space()={_literal(text)}])]"


def starting_with(text: str, tag: str = "*") -> str:
    """XPath of the innermost `tag` elements whose visible text starts with `text`."""
    cond = f"starts-with(normalize-space(), {_literal(text)})"
    return f"//{tag}[{cond} and not(.//{tag}[{cond}])]"


def _literal(text: str) -> str:
    return f'"{text}"' if '"' not in text else "concat('" + text.replace("'", "', \"'\", '") + "')"


@contextmanager
def chromium(shots: Path) -> Iterator[Browser]:
    browser, driver = find_chromium()
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    d = webdriver.Chrome(service=Service(executable_path=driver, log_output=str(shots / "chromedriver.log")),
                         options=options)
    b = Browser(d, shots)
    try:
        yield b
    except BaseException:
        b.shot("failed")  # where it stopped, and the page's DOM to find out why
        (shots / "failed.html").write_text(d.page_source)
        raise
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)
