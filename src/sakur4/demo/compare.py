"""Run the strategies side by side: same script, same server flags, one strategy at a time.

Each run's caller starts a fresh llama-server per strategy with identical flags
(``sakur4 demo``, ``bench/eviction.py``), so no strategy inherits another's cache.
The baseline is the same script with no management on a window large enough to
need none: what the session costs when nothing is evicted, which every
strategy's overhead is measured against.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from sakur4.backends.identify import BackendKind
from sakur4.backends.launcher import ServerFlags
from sakur4.demo.agent import ScriptedAgent
from sakur4.demo.direct import (
    Budget,
    DropOldest,
    Manager,
    NoManagement,
    ObservationMask,
    Summarise,
    run_direct,
)
from sakur4.demo.peers import ClaudeCode, OpenCode
from sakur4.demo.records import StrategyRun
from sakur4.demo.scenario import Session
from sakur4.demo.via_gateway import OnDashboard, run_sakur4
from sakur4.engine import choose_profile
from sakur4.settings import ProfileName, Settings

# Generation stays short: the assistant's text is scripted, the server only has to
# answer. Greedy, so every run generates the same tokens.
CHAT: dict[str, Any] = {"max_tokens": 2, "temperature": 0}


def chat_for(session: Session) -> dict[str, Any]:
    """The request body's fixed part: the generation settings and the session's tools."""
    return {**CHAT, "tools": session.tools}


@dataclass(frozen=True, slots=True)
class Mode:
    """A server mode: a short key (file names, ``--modes``), its name and its flags
    (the window is ``flags.ctx``)."""

    key: str
    name: str
    flags: ServerFlags
    # The server kind the mode runs on (vLLM: bench/eviction.py --backend vllm).
    kind: BackendKind = "llama.cpp"

    @property
    def window(self) -> int:
        return self.flags.ctx


def ring(window: int, cms: int = 256) -> Mode:
    """Gemma 3's default: resume only from the context-checkpoint ring (small ``-cms``)."""
    return Mode("ring", f"ring -cms {cms}", ServerFlags(ctx=window, checkpoint_min_step=cms))


def default_flags(window: int) -> Mode:
    """The server's defaults (no ``-cms``: b11434's ``--help`` gives 8192, and 32
    checkpoints): what a user who skips the probe's advice runs."""
    return Mode("default", "default flags (-cms 8192, 32 checkpoints)", ServerFlags(ctx=window))


def swa_full(window: int) -> Mode:
    """``--swa-full``: a full-size SWA cache, any prefix reusable."""
    return Mode("swa-full", "swa-full", ServerFlags(ctx=window, swa_full=True))


def cache_reuse(window: int, chunk: int = 256) -> Mode:
    """``--swa-full --cache-reuse N``: also shifts the KV of cached chunks of at least
    N tokens that reappear later in the prompt (text removed before them is free)."""
    return Mode(
        "cache-reuse",
        f"swa-full cache-reuse {chunk}",
        ServerFlags(ctx=window, swa_full=True, cache_reuse=chunk),
    )


MODES = {
    "default": default_flags,
    "ring": ring,
    "swa-full": swa_full,
    "cache-reuse": cache_reuse,
}


def mode(key: str, window: int) -> Mode:
    try:
        return MODES[key](window)
    except KeyError:
        raise ValueError(f"unknown server mode {key!r} (one of {', '.join(MODES)})") from None


@dataclass(frozen=True, slots=True)
class Strategy:
    """One row of the comparison.

    ``kind``: sakur4, summarise, drop-oldest, mask-lag1, mask-10turns, opencode,
    claude-code, none. For
    sakur4, ``profile`` forces an eviction profile (None: the probe's choice) and
    ``overrides`` are Settings fields for the gateway (e.g. ``live_results``): the
    only way a Sakur4 variant differs from another.
    """

    kind: str
    label: str
    profile: ProfileName | None = None
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """The strategy's part of a run's cache key."""
        extra = "".join(f",{k}={v}" for k, v in self.overrides)
        return f"{self.label}{extra}" + (f",profile={self.profile}" if self.profile else "")


BASELINE = Strategy("none", "baseline")


def simple_strategies() -> list[Strategy]:
    """The ways harnesses cope today (and the paper's reference), no Sakur4."""
    return [
        Strategy("drop-oldest", "drop-oldest"),
        Strategy("summarise", "summarise"),
        Strategy("mask-lag1", "mask-lag1"),
        Strategy("mask-10turns", "mask-10turns"),
    ]


def peer_strategies() -> list[Strategy]:
    """The harnesses' own policies as published (:mod:`sakur4.demo.peers`)."""
    return [Strategy("opencode", "opencode"), Strategy("claude-code", "claude-code")]


def default_strategies() -> list[Strategy]:
    """Sakur4 with the probe's profile, then the simple policies."""
    return [Strategy("sakur4", "sakur4"), *simple_strategies(), *peer_strategies()]


def forced_profiles() -> list[Strategy]:
    """Sakur4 with each eviction profile forced (SAKUR4_EVICTION_PROFILE)."""
    names: list[ProfileName] = ["cache-first", "balanced", "window-first"]
    return [Strategy("sakur4", f"sakur4 forced {n}", profile=n) for n in names]


def live_results_variants(values: Sequence[int] = (0, 1, 2, 3)) -> list[Strategy]:
    """Sakur4 with the quality dial ``live_results`` set."""
    return [
        Strategy("sakur4", f"sakur4 live_results={v}", overrides=(("live_results", v),))
        for v in values
    ]


def tidy_budget_variants(values: Sequence[int] = (0, 1024)) -> list[Strategy]:
    """Sakur4 with the planner's ``tidy_budget`` (re-processing a fold below the trigger
    may cost) set."""
    return [
        Strategy("sakur4", f"sakur4 tidy_budget={v}", overrides=(("tidy_budget", v),))
        for v in values
    ]


# Headroom's proxy in front of drop-oldest: optional (bench/headroom.py starts it).
HEADROOM = Strategy("headroom", "headroom")


def all_strategies() -> list[Strategy]:
    return [
        *default_strategies(),
        HEADROOM,
        Strategy("none", "none"),
        *forced_profiles(),
        *live_results_variants(),
        *tidy_budget_variants(),
    ]


def strategy(label: str) -> Strategy:
    for st in all_strategies():
        if st.label == label:
            return st
    names = ", ".join(s.label for s in all_strategies())
    raise ValueError(f"unknown strategy {label!r} (one of: {names})")


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


def manager_for(strategy: Strategy, summary_tokens: int) -> Manager:
    if strategy.kind == "summarise":
        return Summarise(summary_tokens)
    if strategy.kind in ("drop-oldest", "headroom"):  # headroom: behind its proxy
        return DropOldest()
    if strategy.kind == "mask-lag1":
        return ObservationMask("mask-lag1", lag=1)
    if strategy.kind == "mask-10turns":
        return ObservationMask("mask-10turns", turns=10)
    if strategy.kind == "opencode":
        return OpenCode(summary_tokens)
    if strategy.kind == "claude-code":
        return ClaudeCode(summary_tokens)
    return NoManagement()


async def run_strategy(
    strategy: Strategy,
    url: str,
    session: Session,
    *,
    settings: Settings,
    mode: Mode,
    summary_tokens: int,
    workdir: Path,
    transport: httpx.AsyncBaseTransport | None = None,
    on_dashboard: OnDashboard | None = None,
) -> StrategyRun:
    """One strategy against the server at ``url`` (already started with ``mode``'s flags).

    ``transport`` carries the calls to the server (None: straight to it);
    ``on_dashboard`` is told Sakur4's dashboard address while its gateway runs.
    """
    chat = chat_for(session)
    unknown = [k for k, _ in strategy.overrides if k not in Settings.model_fields]
    if unknown:
        raise ValueError(f"{strategy.label}: not a setting: {', '.join(unknown)}")
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
        return await run_sakur4(
            s,
            session,
            chat=chat,
            anchor=session.anchor,
            label=strategy.label,
            backend_transport=transport,
            on_dashboard=on_dashboard,
        )
    trigger, target = _budget_profile(settings, mode)
    budget = Budget(mode.window, trigger, target)
    run = await run_direct(
        manager_for(strategy, summary_tokens),
        url,
        ScriptedAgent(session),
        budget=budget,
        chat=chat,
        anchor=session.anchor,
        transport=transport,
        kind=mode.kind,
    )
    return replace(run, strategy=strategy.label)
