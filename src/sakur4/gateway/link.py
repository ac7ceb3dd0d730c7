"""The gateway's link to its backend: it starts before the server, waits for it, says so.

``sakur4 gateway`` serves from the moment it starts; :meth:`BackendLink.run` (a task of
the app's lifespan, cancelled with it, so SIGTERM stops a gateway at once whatever the
backend is doing) reaches the backend, takes its probe result
(:func:`sakur4.probe.recall_or_measure`: stored, or measured where nothing is at
stake) and builds the turn pipeline. Until then a request gets a 503 naming the
backend and why (down, not an inference server); while the backend answers and is
being probed, a request waits for it (at most :data:`READY_WAIT` seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import anyio

from sakur4.backends.http import HttpBackend
from sakur4.errors import BackendError, BackendUnavailable, Sakur4Error
from sakur4.probe import ProbeResult, recall_or_measure, save_probe, stored_probe
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.turns import voice
from sakur4.turns.pipeline import TurnPipeline

LinkState = Literal["connecting", "waiting", "probing", "ready", "unusable"]

# A request that arrives while the backend is being probed waits this long at most.
READY_WAIT = 60.0
# Tries again after 1, 2, 4 … seconds, at most this far apart.
RETRY_MAX = 10.0
# A probe at start-up (an experiment included) that takes longer is given up and tried again.
PROBE_LIMIT = 120.0


class BackendLink:
    """Where the gateway stands with its backend (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        client: HttpBackend,
        build: Callable[[ProbeResult], TurnPipeline],
    ) -> None:
        """``client``: the server's one client (the probe and every kind's client speak
        through its connection)."""
        self.settings = settings
        self.store = store
        self.client = client
        self.build = build
        self.state: LinkState = "connecting"
        # Why the gateway is not ready (the backend's own words), for a 503 and /health.
        self.problem: str | None = None
        self.pipeline: TurnPipeline | None = None
        # Set (and replaced) at every change of state: what a waiting request wakes on.
        self._changed = anyio.Event()
        self._said: LinkState | None = None

    @property
    def url(self) -> str:
        return self.client.url

    async def run(self) -> None:
        """Reach the backend and build the pipeline, trying again until it works."""
        delay = 1.0
        limit = min(self.settings.backend_timeout, 10.0)
        while self.pipeline is None:
            try:
                if self.state != "connecting":
                    await self.client.reach(time_limit=limit)
                self._set("probing", self.problem)
                with anyio.fail_after(PROBE_LIMIT):
                    result, how = await recall_or_measure(
                        self.client, self.settings, self._recall, self._keep
                    )
                pipeline = self._usable(result)
                if result.fingerprint is not None:
                    await pipeline.watch.reread_window()  # what a later read is held against
                self.pipeline = pipeline
            except (Sakur4Error, TimeoutError) as e:
                self._trouble(e, delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            self._set("ready", None)
            voice.note(
                f"backend {self.url} ready: {result.kind} {result.version or ''}, window "
                f"{self.pipeline.window:,} tokens, checkpoints {result.checkpoint_source} "
                f"({how}), profile {self.pipeline.profile.name}, slot parking "
                f"{self.pipeline.scheduler.parking()}"
            )

    def _usable(self, result: ProbeResult) -> TurnPipeline:
        if result.server.is_gateway:
            raise BackendError(
                self.url,
                f"is a Sakur4 gateway in front of {result.upstream or 'another backend'}: "
                "point --backend at the inference server itself",
            )
        return self.build(result)

    def _trouble(self, e: BaseException, delay: float) -> None:
        down = isinstance(e, BackendUnavailable | TimeoutError)
        if isinstance(e, BackendError):
            what = e.what
        elif isinstance(e, Sakur4Error):
            what = str(e)  # e.g. a server that reports no window
        else:
            what = f"no answer within {PROBE_LIMIT:g} s"
        state: LinkState = "waiting" if down else "unusable"
        if state != self._said:  # said once, not at every try
            doing = "waiting for it" if down else "trying again"
            voice.failure(f"backend {self.url}: {what}; {doing} (every {RETRY_MAX:g} s at most)")
            self._said = state
        self._set(state, what)

    def _set(self, state: LinkState, problem: str | None) -> None:
        self.state, self.problem = state, problem
        self._changed.set()
        self._changed = anyio.Event()

    async def _recall(self, url: str, fingerprint: str) -> ProbeResult | None:
        return stored_probe(self.store, url, fingerprint)

    async def _keep(self, result: ProbeResult) -> None:
        save_probe(self.store, result)

    async def ready(self) -> TurnPipeline:
        """The pipeline, once the backend is linked; else a 503 naming it and why."""
        with anyio.move_on_after(READY_WAIT):
            while self.pipeline is None and self.state in ("connecting", "probing"):
                await self._changed.wait()
        if self.pipeline is not None:
            return self.pipeline
        if self.state in ("connecting", "probing"):
            why = f"still being probed after {READY_WAIT:g} s"
        elif self.state == "unusable":
            why = f"not usable ({self.problem}); the gateway tries again"
        else:
            why = f"the gateway is waiting for it ({self.problem})"
        raise BackendUnavailable(self.url, why)
