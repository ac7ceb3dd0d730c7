"""Run the strategies side by side: same script, same server flags, a fresh server each.

A fresh llama-server per strategy (started with identical flags) means no strategy
inherits another's cache. The baseline is the same script with no management on
a window large enough to need none: what the session costs when nothing is
evicted, which every strategy's overhead is measured against.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from sakur4.backends.local import LlamaServer, ServerFlags
from sakur4.demo.direct import Budget, DropOldest, Manager, NoManagement, Summarise, run_direct
from sakur4.demo.records import StrategyRun
from sakur4.demo.scenario import TOOLS, Request
from sakur4.demo.via_gateway import run_sakur4
from sakur4.engine import choose_profile, planner
from sakur4.settings import ProfileName, Settings

# Generation stays short: the assistant's text is scripted, the server only has to
# answer. Greedy, so every run generates the same tokens.
CHAT: dict[str, Any] = {"max_tokens": 2, "temperature": 0, "tools": TOOLS}


@dataclass(frozen=True, slots=True)
class Mode:
    """A server mode: its name and flags (the window is ``flags.ctx``)."""

    name: str
    flags: ServerFlags

    @property
    def window(self) -> int:
        return self.flags.ctx


def ring(window: int, cms: int) -> Mode:
    """Gemma 3's default: resume only from the context-checkpoint ring (small ``-cms``)."""
    return Mode(f"ring -cms {cms}", ServerFlags(ctx=window, checkpoint_min_step=cms))


def swa_full(window: int) -> Mode:
    """``--swa-full``: a full-size SWA cache, any prefix reusable."""
    return Mode("swa-full", ServerFlags(ctx=window, swa_full=True))


@dataclass(frozen=True, slots=True)
class Strategy:
    """One column of the comparison.

    ``kind``: sakur4, summarise, drop-oldest, none. For sakur4, ``profile`` forces
    an eviction profile (None: the probe's choice), ``overrides`` are settings, and
    ``policy`` replaces the planner's :data:`~sakur4.engine.planner.POLICY` for the
    run (the gateway runs in this process): how the benchmark measures alternatives.
    """

    kind: str
    label: str
    profile: ProfileName | None = None
    overrides: tuple[tuple[str, Any], ...] = ()
    policy: planner.Policy | None = None


def default_strategies() -> list[Strategy]:
    """Sakur4 with the probe's profile, and the three ways harnesses cope today."""
    return [
        Strategy("sakur4", "sakur4"),
        Strategy("summarise", "summarise"),
        Strategy("drop-oldest", "drop-oldest"),
        Strategy("none", "none"),
    ]


def forced_profiles() -> list[Strategy]:
    """Sakur4 with each eviction profile forced (SAKUR4_EVICTION_PROFILE)."""
    names: list[ProfileName] = ["cache-first", "balanced", "window-first"]
    return [Strategy("sakur4", f"sakur4 forced {n}", profile=n) for n in names]


@dataclass(frozen=True)
class ModeResult:
    mode: Mode
    baseline: StrategyRun
    runs: tuple[StrategyRun, ...]


def _budget_profile(settings: Settings, mode: Mode) -> tuple[float, float]:
    """The trigger and target the direct strategies use: the profile the probe picks
    for this mode (a ring or full attention both count as a detected source)."""
    p = choose_profile("detected", settings.eviction_profile)
    return p.trigger, p.target


async def run_strategy(
    strategy: Strategy,
    url: str,
    requests: Sequence[Request],
    *,
    settings: Settings,
    mode: Mode,
    anchor: str,
    summary_tokens: int,
    workdir: Path,
    transport: httpx.AsyncBaseTransport | None = None,
) -> StrategyRun:
    """One strategy against the server at ``url`` (already started with ``mode``'s flags).

    ``transport`` carries the calls to the server (None: straight to it).
    """
    if strategy.kind == "sakur4":
        where = Path(tempfile.mkdtemp(prefix="sakur4-", dir=workdir))
        (where / "project").mkdir()
        s = settings.model_copy(
            update={
                "store": where / "sakur4.db",
                "project": where / "project",
                "backend": url,
                "gateway_port": 0,
                "checkpoint_min_step": mode.flags.checkpoint_min_step or 8192,
                "eviction_profile": strategy.profile or settings.eviction_profile,
                **dict(strategy.overrides),
            }
        )
        saved = planner.POLICY
        planner.POLICY = strategy.policy or saved
        try:
            return await run_sakur4(
                s,
                requests,
                chat=CHAT,
                anchor=anchor,
                label=strategy.label,
                backend_transport=transport,
            )
        finally:
            planner.POLICY = saved
    trigger, target = _budget_profile(settings, mode)
    budget = Budget(mode.window, trigger, target)
    manager: Manager
    if strategy.kind == "summarise":
        manager = Summarise(summary_tokens)
    elif strategy.kind == "drop-oldest":
        manager = DropOldest()
    else:
        manager = NoManagement()
    run = await run_direct(
        manager, url, requests, budget=budget, chat=CHAT, anchor=anchor, transport=transport
    )
    return replace(run, strategy=strategy.label)


async def run_mode(
    mode: Mode,
    requests: Sequence[Request],
    strategies: Sequence[Strategy],
    *,
    settings: Settings,
    anchor: str,
    baseline_window: int,
    summary_tokens: int = 256,
    workdir: Path,
    progress: Callable[[str], None] = lambda _: None,
    transport: Callable[[Mode, str], httpx.AsyncBaseTransport] | None = None,
    baseline: StrategyRun | None = None,
) -> ModeResult:
    """The baseline (unless given) and every strategy on ``mode``, each on a fresh server.

    ``transport(mode, url)`` makes the transport each run's calls go through (None:
    straight to the server).
    """
    if baseline is None:
        big = Mode(mode.name, replace(mode.flags, ctx=baseline_window))
        progress(f"[{mode.name}] baseline: no management on a {baseline_window:,}-token window")
        baseline = await _on_fresh_server(
            big,
            Strategy("none", "baseline"),
            requests,
            settings,
            anchor,
            summary_tokens,
            workdir,
            transport,
        )
    runs = []
    for st in strategies:
        progress(f"[{mode.name}] {st.label} on a {mode.window:,}-token window")
        runs.append(
            await _on_fresh_server(
                mode, st, requests, settings, anchor, summary_tokens, workdir, transport
            )
        )
    return ModeResult(mode, baseline, tuple(runs))


async def _on_fresh_server(
    mode: Mode,
    strategy: Strategy,
    requests: Sequence[Request],
    settings: Settings,
    anchor: str,
    summary_tokens: int,
    workdir: Path,
    transport: Callable[[Mode, str], httpx.AsyncBaseTransport] | None,
) -> StrategyRun:
    with LlamaServer.from_settings(settings, mode.flags) as server:
        return await run_strategy(
            strategy,
            server.url,
            requests,
            settings=settings,
            mode=mode,
            anchor=anchor,
            summary_tokens=summary_tokens,
            workdir=workdir,
            transport=transport(mode, server.url) if transport else None,
        )
