"""The starlette app: the page, a JSON API per session, and server-sent events of its state.

| route | what it does |
| --- | --- |
| ``GET /`` | the page (``static/index.html``; plain HTML + JS, no build step) |
| ``GET /api/config`` | model, acceptance, policy, granularity (the page's header) |
| ``POST /api/sessions`` | open a session for this tab → ``{"id": ...}`` |
| ``POST /api/sessions/{id}/text`` | ``{"text": ...}``: the request typed so far |
| ``POST /api/sessions/{id}/submit`` | ``{"text": ...}``: the complete request |
| ``GET /api/sessions/{id}/state`` | the session's snapshot (JSON) |
| ``GET /api/sessions/{id}/events`` | the snapshot again after every change (``text/event-stream``) |
| ``POST /api/sessions/{id}/release`` | close the session (the page sends it on unload) |

Every refusal is JSON ``{"error": message}`` with a status code the page shows as a message. Only
the page itself may drive the API (Host allow-list, same-origin POSTs, JSON bodies under a byte
limit: :mod:`streamgen.demo.guard`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from streamgen.decoding.base import Decoder
from streamgen.demo import guard
from streamgen.demo.manager import SessionManager, UnknownSession
from streamgen.demo.session import DemoInputError
from streamgen.demo.settings import DemoConfig
from streamgen.demo.worker import ModelWorker

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
KEEPALIVE_S = 1.0  # an idle event stream re-checks the connection (and the server's shutdown) this often


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def max_body(cfg: DemoConfig) -> int:
    """Bytes a text update may take: ``max_chars`` characters as JSON escapes (``\\uXXXX``, 6 bytes
    each, the worst case), plus the envelope."""
    return 6 * cfg.max_chars + 1024


class Routes:
    """The request handlers, around one session manager."""

    def __init__(self, manager: SessionManager, info: dict[str, object], max_body: int) -> None:
        self.manager, self.info, self.max_body = manager, info, max_body

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def config(self, request: Request) -> Response:
        return JSONResponse(self.info)

    async def open_session(self, request: Request) -> Response:
        return JSONResponse({"id": self.manager.create().sid})

    async def text(self, request: Request, *, submit: bool = False) -> Response:
        session = self.manager.get(request.path_params["sid"])
        text = guard.checked_text(await guard.read_json(request, self.max_body))
        if not submit and not text.strip():  # only spaces so far: nothing to draft yet, not an error
            text = ""
        await session.update(text, submit=submit)
        return JSONResponse({"ok": True, "segments": len(session.segments)})

    async def submit(self, request: Request) -> Response:
        return await self.text(request, submit=True)

    async def state(self, request: Request) -> Response:
        return JSONResponse(self.manager.get(request.path_params["sid"]).snapshot())

    async def release(self, request: Request) -> Response:
        await self.manager.release(request.path_params["sid"], "closed by the page")
        return JSONResponse({"ok": True})

    async def events(self, request: Request) -> Response:
        session = self.manager.get(request.path_params["sid"])

        async def stream() -> AsyncIterator[str]:
            version = -1
            while not await request.is_disconnected() and not request.app.state.closing:
                if session.version != version:
                    version = session.version
                    yield f"data: {json.dumps(session.snapshot())}\n\n"
                    if session.status == "released":
                        return
                await session.wait_change(version, KEEPALIVE_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DemoInputError)
    return _error(str(exc), exc.status)


async def _unknown(request: Request, exc: Exception) -> Response:
    return _error(f"session {exc.args[0]!r} is unknown or was released; the page opens a new one", 404)


def create_app(decoder: Decoder, cfg: DemoConfig, model_name: str,
               clock: Callable[[], float] = time.perf_counter, port: int | None = None) -> Starlette:
    """The demo app around one loaded decoder (one model worker, one session manager).

    ``clock`` is what sessions read for the flood window and idle timeouts (tests hold it still).
    ``port``: the port the server really listens on (``cfg.port`` may be 0); the Host allow-list
    (:mod:`streamgen.demo.guard`) is ``cfg.host`` and the loopback names with it.
    """
    worker = ModelWorker(decoder)
    manager = SessionManager(worker, cfg, clock)
    r = Routes(manager, {"model": model_name, "family": decoder.family, "acceptance": cfg.acceptance,
                         "tau": cfg.tau, "policy": cfg.policy, "every_k": cfg.every_k,
                         "granularity": cfg.granularity, "max_new_tokens": decoder.max_new_tokens,
                         "idle_timeout_s": cfg.idle_timeout_s}, max_body(cfg))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.closing = False
        manager.start()
        try:
            yield
        finally:
            app.state.closing = True
            await manager.stop()
            worker.close()

    sid = "/api/sessions/{sid}"
    app = Starlette(routes=[
        Route("/", r.page), Route("/api/config", r.config), Route("/api/sessions", r.open_session, methods=["POST"]),
        Route(f"{sid}/text", r.text, methods=["POST"]), Route(f"{sid}/submit", r.submit, methods=["POST"]),
        Route(f"{sid}/state", r.state), Route(f"{sid}/events", r.events),
        Route(f"{sid}/release", r.release, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], lifespan=lifespan, exception_handlers={DemoInputError: _refused, UnknownSession: _unknown},
        middleware=[Middleware(guard.PageOnly, hosts=guard.allowed_hosts(cfg.host, cfg.port if port is None else port))])
    app.state.manager = manager
    app.state.closing = False
    return app
