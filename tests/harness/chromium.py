"""Headless Chromium from the machine's Debian packages, driven by Selenium through
Debian's chromedriver (nothing is downloaded: both paths are given, so Selenium's own
driver manager never runs). Missing, it fails with the command that installs it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "sudo apt-get install -y chromium chromium-driver"
# no connection of Chromium's own (updates, sync, safe browsing, QUIC probes): the
# machine has no network beyond the package registries, and a test needs none
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1280,2000",
)


def chromium(profile: Path) -> webdriver.Chrome:
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not binary.exists() and shutil.which(binary.name) is None:
            pytest.fail(f"{binary} is missing: the browser tests need it ({INSTALL})")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


__all__ = ["INSTALL", "chromium"]
