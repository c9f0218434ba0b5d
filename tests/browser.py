"""Headless Chromium for the page tests: Debian's chromium and chromium-driver, driven by
Selenium (no browser can be downloaded here), and where their screenshots go."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None, reason="Debian's chromium and chromium-driver are needed"
)
ARTIFACTS = Path(
    os.environ.get("ELASTICSITE_ARTIFACTS", Path(__file__).parents[1] / "test-artifacts")
)


def chromium() -> Iterator[Any]:
    """A headless Chromium session (a fixture body: yields the driver, quits after)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--ignore-certificate-errors", "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.implicitly_wait(2)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, group: str, name: str) -> None:
    """Keep a screenshot as a test artefact: ``test-artifacts/GROUP/NAME.png``."""
    ARTIFACTS.joinpath(group).mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / group / f"{name}.png"))
