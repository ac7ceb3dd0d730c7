"""What Sakur4 reports about itself: ``status``, ``receipts`` and ``probe`` tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import anyio.to_thread
from pydantic import BaseModel, Field

from sakur4.bounds import RECEIPTS_LIMIT
from sakur4.errors import InputError
from sakur4.mcp.host import ToolHost
from sakur4.mcp.tools.common import MAX_NAME, ProjectArg, ProjectInfo
from sakur4.mcp.toolserver import ToolServer
from sakur4.receipts import Receipt, list_receipts
from sakur4.status import project_status

if TYPE_CHECKING:  # the probe loads httpx and the backends: imported when it runs
    from sakur4.probe import ProbeResult


class StatusResult(BaseModel):
    project: ProjectInfo
    files: int = Field(description="indexed files (not deleted)")
    facts: int = Field(description="Ledger fact rows, history included")
    atlas_entries: int
    episodes: int
    anchors: int = Field(description="anchors currently pinned")
    receipts: int


class ReceiptOut(BaseModel):
    """One turn's receipt, as stored (SPEC §8)."""

    id: int
    created_at: str
    session: str
    turn: int
    summary: str = Field(description="one line: tokens of window, pressure, profile, verdicts")
    backend: str | None
    context_window: int
    prompt_tokens: int
    pressure: float
    profile: str
    profile_reason: str
    verdict: str = Field(description="fits, reclaimed, stepping or refused")
    cache_verdict: str = Field(
        description="reused (verified), full-re-prefill, or unverifiable (counted as full)"
    )
    reprefilled: int = Field(description="tokens re-processed; pessimistic when unverifiable")
    steps: list[dict[str, Any]]
    requested_cut: int | None
    chosen_cut: int | None
    predicted_reuse: int | None
    server_cached: int | None
    server_processed: int | None
    prefill_ms: float | None
    divergence: int | None
    detail: dict[str, Any]

    @classmethod
    def of(cls, r: Receipt) -> ReceiptOut:
        d = r.as_dict()
        d.pop("project_id")
        return cls(summary=r.summary(), **d)


class ReceiptsResult(BaseModel):
    project: ProjectInfo
    receipts: list[ReceiptOut] = Field(description="oldest first")


class ProbeOut(BaseModel):
    """What the configured inference server can do for Sakur4, as measured (SPEC §8)."""

    fresh: bool = Field(description="probed just now (else: the newest stored result)")
    url: str
    probed_at: str
    kind: str = Field(
        description="llama.cpp, vllm, sglang, ollama, lmstudio, tabbyapi, openai-compatible"
    )
    version: str | None
    model: str | None
    n_ctx: int | None = Field(description="context window per slot")
    n_ctx_train: int | None
    total_slots: int | None
    slot_actions: str = Field(description="slot save/restore: supported, unsupported, unknown")
    exact_tokenization: bool
    layout: str = Field("", description="exact, or estimated and with what margin")
    reuse_verifiable: bool = Field(description="the server reports reused tokens")
    reuse_field: str | None
    checkpoint_source: str
    source_class: str = Field(
        description="detected, none, uncertain or shifting: picks the profile"
    )
    sources: list[str]
    reason: str
    experiment: list[dict[str, Any]] = Field(description="the cache experiment's requests")
    prefill_tokens_per_s: float | None
    advice: list[str]

    @classmethod
    def of(cls, r: ProbeResult, fresh: bool) -> ProbeOut:
        return cls(fresh=fresh, **r.as_dict())


def register(server: ToolServer, host: ToolHost) -> None:
    def status(project: ProjectArg = None) -> StatusResult:
        """Counts for one project: indexed files, Ledger facts, Atlas entries, episodes,
        pinned anchors and receipts. Counts only that project's rows."""
        proj = host.project(project)
        return StatusResult(project=ProjectInfo.of(proj), **project_status(host.store, proj.id))

    server.add(status, title="Project status", writes=False)

    def receipts(
        project: ProjectArg = None,
        session: Annotated[
            str | None, Field(max_length=MAX_NAME, description="only this session")
        ] = None,
        limit: Annotated[
            int, Field(ge=RECEIPTS_LIMIT.lo, le=RECEIPTS_LIMIT.hi, description="how many, newest")
        ] = 50,
    ) -> ReceiptsResult:
        """The project's most recent per-turn receipts (oldest first): tokens of the context
        window, pressure, eviction profile and why, verdict, steps, the cut, and whether the
        server verified cache reuse."""
        proj = host.project(project)
        found = list_receipts(host.store, proj.id, session=session, limit=limit)
        out = [ReceiptOut.of(r) for r in found]
        return ReceiptsResult(project=ProjectInfo.of(proj), receipts=out)

    server.add(receipts, title="Turn receipts", writes=False)

    async def probe_tool(
        refresh: Annotated[
            bool, Field(description="probe the server now instead of reading the stored result")
        ] = False,
        experiment: Annotated[
            bool,
            Field(
                description="with refresh: run the cache experiment on slot 0 (replaces what "
                "that slot has cached; needed to classify the checkpoint source)"
            ),
        ] = True,
    ) -> ProbeOut:
        """What the configured inference server (SAKUR4_BACKEND) can do: context window,
        slots, exact tokenization, whether cache reuse is verifiable, and its checkpoint
        source (which picks the eviction profile). The newest stored result unless
        refresh. The probe is of the server, not of a project."""
        from sakur4.probe import latest_probe, probe, save_probe

        # Only the configured backend: a caller must not make the server fetch any URL.
        url = host.settings.backend
        if url is None:
            raise InputError("no inference server is configured: set SAKUR4_BACKEND")
        if not refresh:
            stored = await anyio.to_thread.run_sync(latest_probe, host.store, url)
            if stored is not None:
                return ProbeOut.of(stored, fresh=False)
        result = await probe(url, host.settings, experiment=experiment)
        await anyio.to_thread.run_sync(save_probe, host.store, result)
        return ProbeOut.of(result, fresh=True)

    # A write: it may store a new result, and a later probe call must see it.
    server.add(probe_tool, name="probe", title="Probe the inference server", writes=True)
