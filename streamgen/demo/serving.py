"""uvicorn around the demo app, ending open event streams as soon as shutdown begins.

uvicorn's shutdown first waits for open connections (up to ``timeout_graceful_shutdown``), then
cancels them, and only then runs the app's lifespan shutdown. An event stream that waited for the
lifespan to say "closing" was therefore cancelled mid-wait and logged a ``CancelledError``
traceback. :class:`DemoServer` sets ``app.state.closing`` when shutdown *begins*: every stream sees
it within ``KEEPALIVE_S`` and returns, and the server stops with a clean log.
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.applications import Starlette

GRACE_S = 3  # longer than streamgen.demo.server.KEEPALIVE_S: streams end on their own first


class DemoServer(uvicorn.Server):
    """A uvicorn server that tells the app it is closing before it waits for connections."""

    def __init__(self, app: Starlette) -> None:
        super().__init__(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACE_S))
        self.demo_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.demo_app.state.closing = True
        await super().shutdown(sockets=sockets)
