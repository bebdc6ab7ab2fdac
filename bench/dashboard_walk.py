"""An operator's questions, answered in a real browser on a large home: how long each
takes and how many pages it needs, at a desktop's and a phone's width.

    .venv/bin/python bench/dashboard_walk.py [--people 100] [--sessions 10000]
        [--postgres URL]

Builds the home `bench/dashboard_pages.py` builds (people with linked accounts and
memory, sessions, reminders, kept errors, usage, job runs, platform health), serves the
dashboard as `hermes dashboard` does and drives Debian's Chromium through each question
of issue #45 the way an operator would: from the Status page, by the navigation, the
banner, a search box and the buttons on the page, to the element that holds the answer
(or, for an action, the page saying it was done). The time is the browser's, from the
first click to the answer on screen (a person adds their reading); the aim is an answer
in under 10 s. Each question runs at 1280 px and at 390 px, with a check that the page
is no wider than the window (no sideways scrolling to the answer or the button).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard_pages import PASSWORD, build, serve_dashboard  # (this folder)
from memory_ops import drop_schema, scratch_schema

from tests.harness.chromium import chromium

WIDTHS = (1280, 390)


class Walk:
    """One question at a time, from the Status page: page loads counted, time taken."""

    def __init__(self, driver: WebDriver, base: str) -> None:
        self.driver, self.base, self.loads = driver, base, 0

    def click(self, by: str, what: str) -> None:
        """Click a link or button and wait for the next page to have loaded."""
        driver = self.driver
        driver.execute_script("window.hermesOldPage = true")
        driver.find_element(by, what).click()
        WebDriverWait(driver, 30).until(
            lambda d: d.execute_script(
                "return window.hermesOldPage === undefined && document.readyState === 'complete'"
            )
        )
        self.loads += 1

    def nav(self, label: str) -> None:
        self.click(By.CSS_SELECTOR, f"nav a[href$='/{label.lower()}']")

    def type(self, text: str) -> None:
        box = self.driver.find_element(By.ID, "q")
        box.clear()
        box.send_keys(text)

    def text(self, css: str) -> str:
        return " ".join(e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css))

    def fits(self, width: int) -> bool:
        wide = int(self.driver.execute_script("return document.documentElement.scrollWidth"))
        return wide <= width


Step = Callable[[], str]


def questions(walk: Walk, people: int) -> list[tuple[str, Step, Step | None]]:
    """Each question with the steps that answer it (returning the answer's text), and
    for an action, the steps that put things back after (not timed)."""
    late, middle = f"Person {people * 77 // 100:03d}", f"Person {people // 2:03d}"

    def is_up() -> str:
        return walk.text("#problems-title") + " | " + walk.text("#platforms + table")

    def went_wrong() -> str:
        walk.click(By.CSS_SELECTOR, "#problems a[href*='/logs']")
        return walk.text("pre.log")

    def remembers() -> str:
        walk.nav("People")
        walk.type("person 003")
        walk.click(By.CSS_SELECTOR, "form[role=search] button")
        walk.click(By.LINK_TEXT, "Person 003")
        return walk.text("p.why")

    def reminders_next() -> str:
        walk.nav("Reminders")
        return walk.text("main table tbody tr:first-child")

    def cost() -> str:
        walk.nav("Usage")
        return walk.text("main table")

    def someones_session() -> str:
        walk.nav("People")
        walk.type(late)
        walk.click(By.CSS_SELECTOR, "form[role=search] button")
        walk.click(By.LINK_TEXT, "sessions")
        walk.click(By.CSS_SELECTOR, "ol.results a")
        return walk.text("h1") + ": " + walk.text("ol.messages li:first-child p.text")

    def search_everyone() -> str:
        walk.nav("Sessions")
        walk.type("invoice")
        walk.click(By.CSS_SELECTOR, "form[role=search] button")
        return walk.text("ol.results")

    def pause_a_job() -> str:
        walk.nav("Scheduler")
        walk.click(By.ID, "pause-maintenance")
        return walk.text("p.note")

    def resume_it() -> str:
        walk.click(By.ID, "resume-maintenance")
        return walk.text("p.note")

    def gateways() -> str:
        walk.nav("Gateways")
        walk.click(By.LINK_TEXT, "30d")
        return walk.text("#health-telegram + *")

    def tools() -> str:
        walk.nav("Tools")
        return walk.text("main table")

    def block() -> str:
        walk.nav("People")
        walk.type(middle)
        walk.click(By.CSS_SELECTOR, "form[role=search] button")
        walk.click(By.XPATH, "//button[@name='blocked' and @value='yes']")
        walk.click(By.ID, "sure")
        return walk.text("p.note")

    def unblock() -> str:
        walk.type(middle)
        walk.click(By.CSS_SELECTOR, "form[role=search] button")
        walk.click(By.XPATH, "//button[@name='blocked' and @value='no']")
        return walk.text("p.note")

    def settings() -> str:
        walk.nav("Settings")
        return walk.driver.find_element(By.ID, "config-text").get_attribute("value") or ""

    return [
        ("Is the bot up?", is_up, None),
        ("What went wrong in the last hour?", went_wrong, None),
        ("What does it remember about Person 003, and why?", remembers, None),
        ("Which reminders fire next?", reminders_next, None),
        ("Tokens and cost per person (30 days)?", cost, None),
        (f"{late}'s latest conversation?", someones_session, None),
        ("Who talked about the invoice (everyone)?", search_everyone, None),
        ("Pause the maintenance job", pause_a_job, resume_it),
        ("Gateways, and Telegram's uptime over 30 days?", gateways, None),
        ("Which tools, and who may use them?", tools, None),
        (f"Block {middle}", block, unblock),
        ("What is configured (config.yaml)?", settings, None),
    ]


def drive(base: str, rounds: int, people: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        driver = chromium(Path(profile))
        try:
            driver.get(base + "/admin/login")
            driver.find_element(By.ID, "password").send_keys(PASSWORD)
            walk = Walk(driver, base)
            walk.click(By.CSS_SELECTOR, "form button")
            print("| question | pages | 1280 px | 390 px | answer found |")
            print("|---|---|---|---|---|")
            for title, step, undo in questions(walk, people):
                times: dict[int, list[float]] = {width: [] for width in WIDTHS}
                answer, pages, fitted = "", 0, True
                for width in WIDTHS:
                    driver.set_window_size(width, 900)
                    for _ in range(rounds):
                        driver.get(base + "/admin/status")
                        walk.loads = 0
                        started = time.perf_counter()
                        answer = step()
                        times[width].append(time.perf_counter() - started)
                        pages = walk.loads
                        fitted = fitted and walk.fits(width)
                        if undo is not None:
                            undo()
                shown = " ".join(answer.replace("|", "/").split())[:60] or "(nothing!)"
                cells = [f"{statistics.median(times[w]):.2f} s" for w in WIDTHS]
                fit = "" if fitted else " (wider than the window!)"
                print(f"| {title} | {pages} | {' | '.join(cells)} | {shown}{fit} |")
        finally:
            driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--people", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default=None)
    args = parser.parse_args()
    args.reminders, args.log_lines = 300, 3000
    scratch = ""
    if args.postgres:
        scratch, args.postgres = scratch_schema(args.postgres)
        server_url = args.postgres.split("?")[0]
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        (home / "config.yaml").write_text("gateway:\n  http:\n    port: 0\n")
        started = time.perf_counter()
        db, people = build(home, args)
        elapsed = time.perf_counter() - started
        print(f"built in {elapsed:.0f} s: {args.people} people, {args.sessions} sessions")
        loop = asyncio.new_event_loop()
        try:
            server, base = loop.run_until_complete(serve_dashboard(home, db, people))
            thread = threading.Thread(target=loop.run_forever, daemon=True)
            thread.start()
            drive(base, args.rounds, args.people)
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        finally:
            db.close()
            if scratch:
                drop_schema(server_url, scratch)


if __name__ == "__main__":
    main()
