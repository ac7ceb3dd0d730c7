"""Run the strategies side by side: same script, same server flags, one strategy at a time.

Each run's caller starts a fresh llama-server per strategy with identical flags
(``sakur4 demo``, ``bench/eviction.py``), so no strategy inherits another's cache.
The baseline is the same script with no management on a window large enough to
need none: what the session costs when nothing is evicted, which every
strategy's overhead is measured against.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from sakur4.backends.identify import BackendKind
from sakur4.backends.launcher import ServerFlags
from sakur4.demo.agent import OnCall, ScriptedAgent
from sakur4.demo.direct import (
    Budget,
    DropOldest,
    Manager,
    NoManagement,
    ObservationMask,
    Summarise,
    run_direct,
)
from sakur4.demo.peers import ClaudeCode, OpenCode, OpenCodeAnchored
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


def swa_full(window: int) -> Mode:
    """``--swa-full``: a full-size SWA cache, any prefix reusable."""
    return Mode("swa-full", "swa-full", ServerFlags(ctx=window, swa_full=True))


@dataclass(frozen=True, slots=True)
class Strategy:
    """One row of the comparison.

    ``kind``: sakur4, summarise, drop-oldest, mask-lag1, mask-10turns, opencode,
    claude-code, none (the benchmark's catalogue: bench/strategies.py). For
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
    if strategy.kind == "drop-oldest":
        return DropOldest()
    if strategy.kind == "mask-lag1":
        return ObservationMask("mask-lag1", lag=1)
    if strategy.kind == "mask-10turns":
        return ObservationMask("mask-10turns", turns=10)
    if strategy.kind == "opencode":
        return OpenCode(summary_tokens)
    if strategy.kind == "opencode-1.18":
        return OpenCodeAnchored(summary_tokens)
    if strategy.kind == "claude-code":
        return ClaudeCode(summary_tokens)
    if strategy.kind == "claude-code-2.1":
        return ClaudeCode(summary_tokens, clear=False)
    if strategy.kind == "none":
        return NoManagement()
    raise ValueError(f"{strategy.label}: no strategy of kind {strategy.kind!r}")


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
    on_call: OnCall | None = None,
) -> StrategyRun:
    """One strategy against the server at ``url`` (already started with ``mode``'s flags).

    ``transport`` carries the calls to the server (None: straight to it);
    ``on_dashboard`` is told Sakur4's dashboard address while its gateway runs;
    ``on_call`` each scripted call's processed tokens (a progress meter).
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
            on_call=on_call,
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
        on_call=on_call,
    )
    return replace(run, strategy=strategy.label)
