"""The backend watch: what the server is now (its probe, window, checkpoint rules), and
every call to it watched for a server lost, restarted or shrunk.

A connection error marks the backend lost; a prompt refused as over the window, or a
turn that reused far less than predicted, marks the window stale. The next turn then
reads the server again first: a server that changed is probed again, and what every
session's slot was predicted to hold is forgotten.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

from sakur4 import engine
from sakur4.backends.http import HttpBackend
from sakur4.backends.ring import CheckpointRules
from sakur4.errors import BackendUnavailable, ContextOverflow, InputError
from sakur4.probe import ProbeResult, recall_or_measure, save_probe, stored_probe
from sakur4.turns import voice
from sakur4.turns.context import TurnContext

# A turn predicted to reuse at least this many tokens that reused none: the server's
# cache was emptied (a restart shows nothing else), so the next turn reads it again.
EMPTIED_BELOW = 256


def _emptied(predicted: int | None, reused: int | None) -> bool:
    return bool(predicted and predicted >= EMPTIED_BELOW and reused is not None and reused == 0)


class BackendWatch:
    """What the pipeline knows of its backend, and the watch every call to it goes through."""

    def __init__(
        self, ctx: TurnContext, probe: ProbeResult, prober: HttpBackend | None = None
    ) -> None:
        self.ctx = ctx
        # Read at every turn: named here for short.
        settings, client = ctx.settings, ctx.client
        self.settings, self.client, self.sessions = settings, client, ctx.sessions
        self.probe = probe
        # What a changed server is probed again through (the link's client, else the
        # pipeline's own when it speaks HTTP itself).
        self._prober = prober or (client if isinstance(client, HttpBackend) else None)
        if not probe.n_ctx:
            raise InputError(
                f"the backend {probe.url} ({probe.kind}) did not report its context window: "
                "set SAKUR4_BACKEND_WINDOW"
            )
        self.rules = self._rules(probe)
        # Set when the backend was lost (a connection error): it may come back
        # restarted, with another window, so the next turn reads the window first.
        # Also set (without _lost) when a turn reused far less than predicted: a
        # server restarted between two turns shows nothing else.
        self._window_stale = False
        self._lost = False
        # Reading the backend again is done by one turn at a time (it may probe it).
        self._reread_lock = asyncio.Lock()
        # The newest task id the server showed at the last read (a smaller one: it
        # restarted), and whether the pipeline has sent it a turn (a server whose slots
        # served nothing since it started, after that, restarted).
        self._last_task: int | None = None
        self._sent_any = False
        # One more each time the server's cache is found gone (a restart, another
        # server, another window): what the slot scheduler knew of the slots is void.
        self.generation = 0
        # Every session's plans share these; built once, again when the window changes.
        self.plan_settings = engine.PlanSettings(
            probe.n_ctx,
            self._profile(probe),
            engine.Policy(
                live_results=settings.live_results,
                tidy_budget=settings.tidy_budget,
                cut_tolerance=settings.cut_tolerance,
            ),
        )

    def _rules(self, probe: ProbeResult) -> CheckpointRules:
        """The checkpoint predictor's rules for what ``probe`` found, with the checkpoint
        step the server really uses where it shows it (its command line), else the
        setting's (a larger step than the server's predicts fewer checkpoints, never
        more; issue 38: the README's `-cms 512` was planned as 8192)."""
        rules = probe.checkpoint_rules() or CheckpointRules()
        step = probe.checkpoint_min_step
        return replace(rules, min_step=self.settings.checkpoint_min_step if step is None else step)

    def _profile(self, probe: ProbeResult) -> engine.Profile:
        """The eviction profile for what ``probe`` found (or the one the setting names)."""
        return engine.choose_profile(probe.source_class, self.settings.eviction_profile)

    @property
    def window(self) -> int:
        """The backend's context window, in tokens."""
        return self.plan_settings.window

    @property
    def profile(self) -> engine.Profile:
        """The eviction profile the probe chose (or the setting named)."""
        return self.plan_settings.profile

    def answered(self, predicted: int | None, reused: int | None) -> None:
        """A turn was answered: a cache found emptied has the next turn read the server."""
        self._sent_any = True
        if _emptied(predicted, reused):
            self._window_stale = True

    def backend_lost(self, error: BaseException | None = None) -> None:
        """The backend stopped answering: what it cached, and maybe its window, is gone."""
        if not self._lost:
            why = f" ({error})" if error is not None else f" ({self.client.url})"
            voice.failure(f"backend lost{why}; the next turn reads it again")
        self._window_stale = self._lost = True

    async def fresh(self) -> None:
        """Before a turn: read the backend again if it may have changed since the last."""
        if self._window_stale:
            async with self.watching():
                await self.reread_window()

    async def fresh_slots(self) -> None:
        """Before a turn on parked slots: read the server again whatever the last turn
        showed (a few ms), so that a restart is seen before a slot is trusted."""
        async with self.watching():
            await self.reread_window()

    async def reread_window(self) -> int:
        """Read the backend again. A server that changed (another build, model, window,
        slot count or template; or restarted, as flags such as ``--swa-full`` are not
        shown) gets its probe taken again (:meth:`_reprobe`); a changed window alone (a
        restart with another ``-c``) also forgets what every session's slot was
        predicted to hold."""
        async with self._reread_lock:
            now = await self.probe.server.reread(self.client, 10.0)
            if now is None or self._prober is None:
                return await self._reread_window_only()
            restarted = (now.last_task is None and self._sent_any) or (
                self._last_task is not None and (now.last_task or -1) < self._last_task
            )
            self._last_task = now.last_task
            if now.fingerprint != self.probe.fingerprint or restarted:
                await self._reprobe(restarted)
            elif now.window is not None and now.window != self.window:
                voice.failure(
                    f"backend {self.client.url}: window {self.window:,} -> {now.window:,} tokens"
                )
                self.plan_settings = replace(self.plan_settings, window=now.window)
                self._cache_gone()
            elif self._lost:
                self._cache_gone()  # restarted: its cache is empty
            self._window_stale = self._lost = False
            return self.window

    async def _reread_window_only(self) -> int:
        """A server that shows no fingerprint (not llama.cpp): its window alone."""
        window = await self.client.context_window()
        changed = window is not None and window != self.window
        if changed and window is not None:
            voice.failure(f"backend {self.client.url}: window {self.window:,} -> {window:,} tokens")
            self.plan_settings = replace(self.plan_settings, window=window)
        if changed or self._lost:
            self._cache_gone()
        self._window_stale = self._lost = False
        return self.window

    async def _reprobe(self, restarted: bool) -> None:
        """Take the changed server's probe (stored for its fingerprint, or measured where
        nothing is at stake) and plan with it from now on."""
        assert self._prober is not None
        result, how = await recall_or_measure(
            self._prober, self.settings, self._recall, self._keep, changed=restarted
        )
        if not result.n_ctx:
            raise BackendUnavailable(self.client.url, "no longer reports its context window")
        old, self.probe = self.probe, result
        self.rules = self._rules(result)
        self.plan_settings = replace(
            self.plan_settings, window=result.n_ctx, profile=self._profile(result)
        )
        # What every slot was predicted to hold belongs to the server that was.
        self.sessions.slots.forget()
        if result.total_slots != old.total_slots:
            self.sessions.reassign(result.total_slots)
        self._cache_gone()
        voice.failure(
            f"backend {self.client.url} changed{' (restarted)' if restarted else ''}: window "
            f"{old.n_ctx:,} -> {result.n_ctx:,}, checkpoints {old.checkpoint_source} -> "
            f"{result.checkpoint_source} ({how}), profile {self.profile.name}"
        )

    def _cache_gone(self) -> None:
        """The server's cache is gone: no session predicts it, no slot holds anyone."""
        self.sessions.forget_server()
        self.generation += 1

    async def _recall(self, url: str, fingerprint: str) -> ProbeResult | None:
        return await self.ctx.calls.run(stored_probe, self.ctx.store, url, fingerprint)

    async def _keep(self, result: ProbeResult) -> None:
        await self.ctx.calls.run(save_probe, self.ctx.store, result)

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Notice a backend that went away or now has a smaller window than planned for."""
        try:
            yield
        except ContextOverflow as e:
            voice.failure(f"backend refused a prompt over its window ({e}); reading it again")
            with contextlib.suppress(BackendUnavailable):
                await self.reread_window()
            raise
        except BackendUnavailable as e:
            self.backend_lost(e)
            raise
