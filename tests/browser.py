"""Headless Chromium from the system's packages (Debian's `chromium` and `chromium-driver`,
which `.ci/run` installs), driven by Selenium. Missing, it fails the test: never a skip."""

from __future__ import annotations

import shutil

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


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
