"""Headless Chromium from the system's packages (Debian's `chromium` and `chromium-driver`,
which `.ci/run` installs), driven by Selenium. Missing, it fails the test: never a skip."""

from __future__ import annotations

import shutil

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait


def chromium(width: int = 1280, height: int = 1000) -> webdriver.Chrome:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    assert browser and driver, "install Debian's chromium and chromium-driver (see .ci/run)"
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(driver))


def click_and_load(browser: WebDriver, element: WebElement, timeout_s: float = 30.0) -> None:
    """Click `element` and wait until the page it leads to has replaced this one and loaded.

    Selenium's click returns before a form's navigation ends: elements found right after it
    may be the old page's, and go stale as they are read. The old page is marked in its window,
    which a new document does not inherit (chromedriver answers `staleness_of` on a detached
    node with an inspector error, so the mark is checked instead).
    """
    browser.execute_script("window.kairosLeaving = true;")
    element.click()

    def arrived(driver: WebDriver) -> bool:
        return bool(
            driver.execute_script(
                "return window.kairosLeaving === undefined && document.readyState === 'complete';"
            )
        )

    WebDriverWait(browser, timeout_s, ignored_exceptions=(WebDriverException,)).until(arrived)
