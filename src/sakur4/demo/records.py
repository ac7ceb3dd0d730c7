"""What one strategy's replay of the scripted session produced, request by request.

Token counts come from the server's own timings (``prompt_n`` processed,
``cache_n`` reused): they are the reliable figures on a shared machine. Times
are the server's too (``prompt_ms``, ``predicted_ms``), plus the wall time of
any summary a strategy asked for.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One model call of the replay, as the server reported it.

    ``anchor`` is None before the correction exists in the script, else whether
    its text was in the messages the server received. ``event`` names the
    management event that changed the prompt before this call (None: appended).
    """

    index: int
    turn: int
    step: int
    prompt_tokens: int
    processed: int
    reused: int
    prompt_ms: float
    gen_ms: float
    failed: str | None = None
    anchor: bool | None = None
    event: str | None = None
    reread: str | None = None  # the tool of a re-read call (a need turn's result was missing)

    @classmethod
    def refused(
        cls, index: int, request: Any, failed: str | None, anchor: bool | None, event: str | None
    ) -> RequestRecord:
        """A call the server (or gateway) refused: no tokens, the reason kept.
        ``request`` is the :class:`~sakur4.demo.scenario.Request` that was sent."""
        return cls(
            index,
            request.turn,
            request.step,
            0,
            0,
            0,
            0.0,
            0.0,
            failed,
            anchor,
            event,
            reread=request.reread,
        )


@dataclass(frozen=True, slots=True)
class SummaryCall:
    """A summary a compaction strategy generated: real tokens, timed."""

    before_index: int
    prompt_tokens: int
    processed: int
    generated: int
    prompt_ms: float
    gen_ms: float
    wall_ms: float


@dataclass(frozen=True, slots=True)
class StrategyRun:
    """One strategy over the whole script on one server."""

    strategy: str
    window: int
    records: tuple[RequestRecord, ...]
    summaries: tuple[SummaryCall, ...] = ()
    evicted: int = 0  # episodes or messages taken out of the prompt in full
    recoverable: int = 0  # of those, how many can still be opened at the end
    profile: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    live_turns: tuple[int, ...] = ()  # per tool result, turns it stayed in the prompt in full

    @property
    def rereads(self) -> int:
        """Calls the agent spent fetching a needed result again."""
        return sum(1 for r in self.records if r.reread)

    @property
    def reread_tokens(self) -> int:
        """What the server processed for those calls (the call and the full result)."""
        return sum(r.processed for r in self.records if r.reread)

    @property
    def summary_generated(self) -> int:
        return sum(s.generated for s in self.summaries)

    @property
    def median_live(self) -> float | None:
        return statistics.median(self.live_turns) if self.live_turns else None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["detail"] = {k: v for k, v in self.detail.items() if k != "receipts"}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StrategyRun:
        return cls(
            strategy=d["strategy"],
            window=d["window"],
            records=tuple(RequestRecord(**r) for r in d["records"]),
            summaries=tuple(SummaryCall(**x) for x in d.get("summaries", ())),
            evicted=d.get("evicted", 0),
            recoverable=d.get("recoverable", 0),
            profile=d.get("profile"),
            detail=d.get("detail", {}),
            live_turns=tuple(d.get("live_turns", ())),
        )

    @property
    def processed(self) -> int:
        """Tokens the server processed: every call's ``prompt_n``, summaries included."""
        return sum(r.processed for r in self.records) + sum(s.processed for s in self.summaries)

    @property
    def prefill_ms(self) -> float:
        return sum(r.prompt_ms for r in self.records)

    @property
    def gen_ms(self) -> float:
        return sum(r.gen_ms for r in self.records)

    @property
    def summary_ms(self) -> float:
        """Time of the summary calls (their prefill and generation): the wall time, or
        the server's own timings where they are longer (a simulated server answers at
        once and reports predicted times)."""
        return sum(max(s.wall_ms, s.prompt_ms + s.gen_ms) for s in self.summaries)

    @property
    def failed_requests(self) -> int:
        return sum(1 for r in self.records if r.failed)

    @property
    def failed_turns(self) -> int:
        return len({r.turn for r in self.records if r.failed})

    @property
    def anchor_kept(self) -> bool:
        """True when every prompt sent after the correction carried it."""
        return all(r.anchor for r in self.records if r.anchor is not None and not r.failed)

    @property
    def anchor_lost_at(self) -> int | None:
        """The first request whose prompt lacked the correction (None: never)."""
        for r in self.records:
            if r.anchor is False and not r.failed:
                return r.index
        return None

    @property
    def events(self) -> int:
        return sum(1 for r in self.records if r.event)


@dataclass(frozen=True, slots=True)
class Comparison:
    """A strategy's totals next to the no-management baseline and the reference strategy."""

    run: StrategyRun
    baseline: StrategyRun

    @property
    def overhead_tokens(self) -> int:
        """Tokens processed beyond what the same script costs with no management at all."""
        return self.run.processed - self.baseline.processed

    @property
    def prefill_rate(self) -> float:
        """The baseline's prefill speed (tokens/ms), to price tokens in time; the run's
        own when the baseline was counted rather than run (the demo's)."""
        for r in (self.baseline, self.run):
            ms = sum(x.prompt_ms for x in r.records)
            if ms > 0:
                return sum(x.processed for x in r.records) / ms
        return 0.0

    @property
    def overhead_ms(self) -> float:
        """Management time: the chat calls' overhead tokens at the baseline's prefill
        speed, plus the summaries' wall time (their prefill and generation). Priced
        rather than measured: on a shared machine the prefill time of two runs
        differs by more than the overhead."""
        rate = self.prefill_rate
        chat = self.overhead_tokens - sum(s.processed for s in self.run.summaries)
        priced = chat / rate if rate > 0 else 0.0
        return max(priced, 0.0) + self.run.summary_ms


def compare(runs: Sequence[StrategyRun], baseline: StrategyRun) -> list[Comparison]:
    return [Comparison(r, baseline) for r in runs]
