"""The console in a real browser: Playwright driving Debian's Chromium, headless.

Playwright's own browser download is not used (`playwright install` needs the internet): the
tests look for a Chromium on the machine (`AGENT_JOBS_TEST_CHROMIUM`, else `chromium`,
`chromium-browser`, `google-chrome` on PATH). Without one, or without the `playwright` package,
they skip on a laptop and fail when AGENT_JOBS_REQUIRE_SERVICES=1 (as in CI, whose `.ci/run`
installs Debian's `chromium`).

With AGENT_JOBS_TEST_SCREENSHOTS=DIR, each page the tests visit is also saved there as a PNG
(the README's screenshots: `AGENT_JOBS_TEST_SCREENSHOTS=docs/console`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.services import require_services

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}


def _unavailable(what: str) -> None:
    if require_services():
        pytest.fail(f"{what} is required (AGENT_JOBS_REQUIRE_SERVICES=1) but not available")
    pytest.skip(f"{what} not available")


def chromium_path() -> str | None:
    own = os.environ.get("AGENT_JOBS_TEST_CHROMIUM")
    if own:
        return own if Path(own).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


# Package-scoped, not session-scoped: Playwright's sync API leaves this thread marked as running
# its asyncio loop for as long as the driver lives, and every later test in the process then
# fails in `asyncio.run`/`anyio.run` ("Already running asyncio in this thread"). Kept for the
# whole session, it made the simulator's in-process MCP calls fail in every test after these.
@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package")
    path = chromium_path()
    if path is None:
        _unavailable("Chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Tab:
    """One browser tab on the console, recording every request it makes and every message the
    page logs (a CSP violation is logged as an error)."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.requests: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _console(self, message: Any) -> None:
        # An HTTP error status the page answers itself (a search that finds nothing) is logged
        # by the browser too; anything else at error level (a CSP refusal, a script error) counts.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.errors.append(message.text)

    def open(self, token: str, hash_: str = "") -> Any:
        self.page.goto(f"{self.base}/console{hash_}")
        self.page.fill("#token", token)
        self.page.click("#login-form button[type=submit]")
        self.page.wait_for_selector("#who:not(:empty)")
        return self.page

    def foreign_requests(self) -> list[str]:
        origin = urlsplit(self.base).netloc
        return [u for u in self.requests if urlsplit(u).netloc != origin]

    def shoot(self, name: str) -> None:
        out = os.environ.get("AGENT_JOBS_TEST_SCREENSHOTS")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(out) / f"{name}.png"))


@pytest.fixture
def tab_factory(browser: Any) -> Iterator[Any]:
    contexts: list[Any] = []

    def make(base: str) -> Tab:
        context = browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        return Tab(context.new_page(), base)

    yield make
    for c in contexts:
        c.close()
