"""Only the demo's own page may drive it: a Host allow-list, a same-origin check on every
state-changing request, and JSON bodies read under a byte limit.

- **Host**: every request must name the address the server is bound to, or ``localhost`` / the
  loopback address, with its port. A page on another name that resolves to 127.0.0.1 (DNS rebinding)
  is refused with 421, so it never reads or drives a session.
- **Origin**: a ``POST`` that carries ``Origin`` (browsers send it on every cross-origin and on
  same-origin fetches) must come from one of those hosts over ``http``; ``Origin: null`` and
  ``Sec-Fetch-Site: cross-site`` are refused with 403. A ``POST`` without ``Origin`` is not from a
  web page (curl, scripts on this machine) and is let through.
- **Bodies**: JSON only under ``Content-Type: application/json`` (415 otherwise: a cross-site
  "simple" ``text/plain`` request needs no preflight), at most ``max_body`` bytes, checked from
  ``Content-Length`` before reading and again while reading (413); malformed, deeply nested or
  non-UTF-8 JSON is 400 with a message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from streamgen.demo.session import DemoInputError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """``Host`` header values this server answers: its bound address and the loopback names, with the port."""
    bound = f"[{host}]" if ":" in host else host
    names = {bound, *LOOPBACK_NAMES} if bound not in ("0.0.0.0", "[::]") else set(LOOPBACK_NAMES)
    return frozenset(f"{n}:{port}" for n in names)


class PageOnly:
    """ASGI middleware: the Host and Origin checks of the module docstring."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app, self.hosts = app, frozenset(h.lower() for h in hosts)
        self.origins = frozenset(f"http://{h}" for h in self.hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope["method"], headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        message, status = refusal
        await JSONResponse({"error": message}, status_code=status)(scope, receive, send)

    def _refusal(self, method: str, headers: dict[str, str]) -> tuple[str, int] | None:
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return (f"this demo answers only its own address ({', '.join(sorted(self.hosts))}), not "
                    f"Host {host or '(none)'!r}: open the address it printed", 421)
        if method in ("GET", "HEAD", "OPTIONS"):
            return None
        origin = headers.get("origin")
        if headers.get("sec-fetch-site") == "cross-site" or (origin is not None and origin.lower() not in self.origins):
            return (f"requests from {origin or 'another site'} are refused: only the demo's own page "
                    f"(http://{host}/) may change its sessions", 403)
        return None


async def read_json(request: Request, max_body: int) -> Any:
    """The request's JSON body, read under the limits of the module docstring; raises DemoInputError."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise DemoInputError(f"send the body as Content-Type: application/json, not {media or 'none'!r}", 415)
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > max_body):
        raise DemoInputError(f"the body is {declared} bytes; this demo takes at most {max_body}", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise DemoInputError(f"the body is over {max_body} bytes; this demo takes at most {max_body}", 413)
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise DemoInputError("the body is not UTF-8: send JSON text encoded as UTF-8", 400) from None
    except RecursionError:
        raise DemoInputError("the JSON is nested too deeply: send {\"text\": \"...\"}", 400) from None
    except ValueError as exc:
        raise DemoInputError(f"the body is not valid JSON ({exc}): send {{\"text\": \"...\"}}", 400) from None


def checked_text(body: Any) -> str:
    """``body["text"]`` if it is text UTF-8 can carry; raises DemoInputError (400) otherwise."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        raise DemoInputError('send JSON {"text": "..."} with the request as a string', 400)
    text: str = body["text"]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise DemoInputError(f"the text holds U+{ord(bad):04X} at character {exc.start}, a lone surrogate no "
                             "encoding can carry: remove it (it is half of a character)", 400) from None
    return text
