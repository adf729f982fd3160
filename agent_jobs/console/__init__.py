"""The web console: pages and their static assets, served by the API under `/console`.

Static HTML, CSS and JavaScript from this package (no build step, no CDN: it works on a network
without the internet). The page calls the same JSON API every other client calls — `/v1/...`,
plus the read-only views of `/v1/console` (`api.console_api`) — so the console can do nothing a
token could not do with curl, and the tenant walls are the API's.

Its safety rests on four choices, each tested (tests/integration/test_console_api.py and
tests/browser/):

- **The session is the bearer token.** The sign-in form takes a token (from
  `agent-jobs token`, or from the organisation's identity provider: anything that mints a JWT
  the API verifies); it is kept in the tab's `sessionStorage` and sent as
  `Authorization: Bearer`. No cookie exists, so a cross-site form or image cannot make a request
  the API would accept: that is the cross-site request forgery defence, and the API does not
  answer CORS preflights, so another origin's script cannot send the header either.
- **Everything is rendered as text.** The script builds the page with `textContent` and DOM
  calls only, never `innerHTML`: a customer's name or an order note holding markup is shown,
  not run.
- **A strict Content-Security-Policy** on every `/console` response: scripts, styles and
  connections from this origin only, no inline script, no framing.
- **The tenant is the token's**: every view is an API route scoped by it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

CONSOLE_PATH = "/console"
STATIC_PATH = f"{CONSOLE_PATH}/static"
STATIC_DIR = Path(str(resources.files(__name__) / "static"))

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class _ConsoleStatic(StaticFiles):
    """The console's assets, with the console's security headers."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                headers.append((b"cache-control", b"no-cache"))
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, with_headers)


def install_console(app: FastAPI) -> None:
    """Serve the console at `/console` and its assets at `/console/static/`."""
    app.mount(STATIC_PATH, _ConsoleStatic(directory=STATIC_DIR), name="console-static")

    @app.get(CONSOLE_PATH, include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(
            STATIC_DIR / "index.html",
            media_type="text/html; charset=utf-8",
            headers={**SECURITY_HEADERS, "Cache-Control": "no-store"},
        )
