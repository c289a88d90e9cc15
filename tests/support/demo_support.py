"""Shared pieces of the demo tests: a tiny decoder, a demo config, the real server in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from streamgen.config import model_config
from streamgen.demo.settings import DemoConfig
from streamgen.families.autoregressive.decoder import AutoregressiveDecoder
from streamgen.families.registry import load_decoder

FAST = DemoConfig(model="tiny-llama", max_new_tokens=16, policy="latest", idle_timeout_s=60.0)


def tiny_decoder(max_new_tokens: int = 16, max_context: int | None = None) -> AutoregressiveDecoder:
    """The seeded tiny llama every demo test uses; a second call builds identical weights."""
    dec = load_decoder(model_config("tiny-llama"), max_new_tokens=max_new_tokens)
    assert isinstance(dec, AutoregressiveDecoder)
    if max_context is not None:
        dec.max_context = max_context
    return dec


def config(**changes: Any) -> DemoConfig:
    return replace(FAST, **changes)


def user(text: str) -> list[dict[str, str]]:
    """The messages the demo sends for ``text`` (no system turn: the model's own system prompt applies)."""
    return [{"role": "user", "content": text}]


def wait_for(predicate: Callable[[], Any], timeout_s: float = 120.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class HeldClock:
    """A clock a test can hold still: while held every reading is the same instant, so no update ages out of
    the server's one-second flood window however slowly the machine runs; ``release`` jumps past it."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._held: float | None = None

    def __call__(self) -> float:
        held = self._held
        return held if held is not None else time.perf_counter() + self._offset

    def hold(self) -> None:
        self._held = self()

    def release(self, jump_s: float) -> None:
        assert self._held is not None, "release() without hold()"
        self._offset = self._held + jump_s - time.perf_counter()
        self._held = None


class ServerThread:
    """The real app on uvicorn, on a free loopback port, in a background thread; ``make_app(port)``
    builds the app for the port it listens on (its Host allow-list names it)."""

    def __init__(self, make_app: Callable[[int], Any]) -> None:
        from streamgen.demo.__main__ import bind
        from streamgen.demo.serving import DemoServer

        self.sock = bind("127.0.0.1", 0)
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/"
        app = make_app(self.port)
        self.server = DemoServer(app)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        wait_for(lambda: self.server.started, 60, "the server to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive(), "the demo server did not shut down"
