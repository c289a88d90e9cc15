"""All open tabs: create a session per tab, find it by id, release it when idle or closed.

Each tab gets its own :class:`DemoSession` (its own stream session and KV cache), so two tabs never
see each other's drafts; all of them share the one model worker. A sweeper releases a session that
has had no update for ``idle_timeout_s``; the page is told and starts a new one on the next keystroke.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable

from streamgen.acceptance_rules import make_rule
from streamgen.demo.session import DemoInputError, DemoSession, Limits
from streamgen.demo.settings import DemoConfig
from streamgen.demo.worker import ModelWorker
from streamgen.timing.granularity import make_segmenter
from streamgen.timing.policies import Policy

log = logging.getLogger(__name__)


class UnknownSession(KeyError):
    """No open session has this id (never created, released when idle, or closed)."""


class SessionManager:
    """Sessions by id, all drafting on one :class:`ModelWorker`."""

    def __init__(self, worker: ModelWorker, cfg: DemoConfig, clock: Callable[[], float] = time.perf_counter) -> None:
        self.worker, self.cfg, self.clock = worker, cfg, clock
        self.rule = make_rule(cfg.acceptance, {"tau": cfg.tau})
        self.policy = Policy(cfg.policy, k=cfg.every_k)
        self.segmenter = make_segmenter(cfg.granularity, cfg.segment_chars)
        self.limits = Limits(cfg.max_chars, cfg.max_updates_per_s)
        self.sessions: dict[str, DemoSession] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def create(self) -> DemoSession:
        if len(self.sessions) >= self.cfg.max_sessions:
            raise DemoInputError(f"{len(self.sessions)} sessions are open, the most this server takes "
                                 f"(max_sessions={self.cfg.max_sessions}); close a tab or wait for idle ones "
                                 "to be released", 503)
        sid = secrets.token_urlsafe(9)
        self.sessions[sid] = DemoSession(sid, self.worker, self.segmenter, self.rule, self.policy, self.limits,
                                         self.clock)
        log.info("session %s opened (%d open)", sid, len(self.sessions))
        return self.sessions[sid]

    def get(self, sid: str) -> DemoSession:
        try:
            return self.sessions[sid]
        except KeyError:
            raise UnknownSession(sid) from None

    async def release(self, sid: str, reason: str) -> None:
        session = self.sessions.pop(sid, None)
        if session is not None:
            await session.release(reason)
            log.info("session %s released: %s", sid, reason)

    async def release_idle(self) -> list[str]:
        """Release every session idle for longer than ``idle_timeout_s``; return their ids."""
        now, limit = self.clock(), self.cfg.idle_timeout_s
        idle = [sid for sid, s in self.sessions.items() if now - s.last_seen > limit]
        for sid in idle:
            await self.release(sid, f"released after {limit:g} s without typing; type to start a new session")
        return idle

    async def _sweep(self) -> None:
        period = min(5.0, self.cfg.idle_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            await self.release_idle()

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="demo-idle-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for sid in list(self.sessions):
            await self.release(sid, "the server is shutting down")
