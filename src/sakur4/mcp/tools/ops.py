"""Operations tools: ``status`` (and, as their services land, ``receipts`` and ``probe``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from sakur4.mcp.host import ToolHost
from sakur4.mcp.tools.common import MAX_NAME, ProjectArg, ProjectInfo
from sakur4.mcp.toolserver import ToolServer
from sakur4.receipts import Receipt, list_receipts
from sakur4.status import project_status


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
        limit: Annotated[int, Field(ge=1, le=1000, description="how many, newest")] = 50,
    ) -> ReceiptsResult:
        """The project's most recent per-turn receipts (oldest first): tokens of the context
        window, pressure, eviction profile and why, verdict, steps, the cut, and whether the
        server verified cache reuse."""
        proj = host.project(project)
        found = list_receipts(host.store, proj.id, session=session, limit=limit)
        out = [ReceiptOut.of(r) for r in found]
        return ReceiptsResult(project=ProjectInfo.of(proj), receipts=out)

    server.add(receipts, title="Turn receipts", writes=False)
