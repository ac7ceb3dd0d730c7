"""Anchor tools: ``anchor_pin``, ``anchor_unpin``, ``anchor_list`` (SPEC §7, Anchors)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from sakur4.anchors import PinnedAnchor, list_anchors, pin_anchor, unpin_anchor
from sakur4.bounds import PRIORITY, WIRE_ID
from sakur4.mcp.host import ToolHost
from sakur4.mcp.tools.common import MAX_NAME, ProjectArg, ProjectInfo
from sakur4.mcp.toolserver import ToolServer

# An anchor rides in every prompt: a long one costs every turn.
MAX_ANCHOR = 4000

SessionArg = Annotated[
    str | None,
    Field(max_length=MAX_NAME, description="only this session (default: the whole project)"),
]


class AnchorOut(BaseModel):
    id: int
    text: str
    priority: int = Field(description="higher comes first in the anchor block")
    session: str | None = Field(description="None: applies to every session")
    pinned_at: str
    unpinned_at: str | None

    @classmethod
    def of(cls, a: PinnedAnchor) -> AnchorOut:
        return cls(
            id=a.id,
            text=a.text,
            priority=a.priority,
            session=a.session,
            pinned_at=a.pinned_at,
            unpinned_at=a.unpinned_at,
        )


class AnchorResult(BaseModel):
    project: ProjectInfo
    anchor: AnchorOut


class AnchorListResult(BaseModel):
    project: ProjectInfo
    anchors: list[AnchorOut] = Field(description="highest priority first, then oldest")


def register(server: ToolServer, host: ToolHost) -> None:
    def anchor_pin(
        text: Annotated[str, Field(min_length=1, max_length=MAX_ANCHOR)],
        priority: Annotated[int, Field(ge=PRIORITY.lo, le=PRIORITY.hi)] = 0,
        session: SessionArg = None,
        project: ProjectArg = None,
    ) -> AnchorResult:
        """Pin a constraint the agent must never lose: it is kept in every prompt, above
        compaction. If the pinned anchors cannot fit, the request is refused visibly
        rather than one being dropped."""
        proj = host.project(project)
        a = pin_anchor(host.store, proj.id, text, priority=priority, session=session)
        return AnchorResult(project=ProjectInfo.of(proj), anchor=AnchorOut.of(a))

    def anchor_unpin(
        anchor_id: Annotated[
            int, Field(ge=WIRE_ID.lo, le=WIRE_ID.hi, description="as anchor_list shows it")
        ],
        project: ProjectArg = None,
    ) -> AnchorResult:
        """Unpin an anchor of this project; it stays listed (with include_unpinned) with the
        time it was unpinned."""
        proj = host.project(project)
        a = unpin_anchor(host.store, proj.id, anchor_id)
        return AnchorResult(project=ProjectInfo.of(proj), anchor=AnchorOut.of(a))

    def anchor_list(
        session: SessionArg = None,
        include_unpinned: bool = False,
        project: ProjectArg = None,
    ) -> AnchorListResult:
        """The anchors in force for the project (and `session`, if given), in the order
        the anchor block renders them."""
        proj = host.project(project)
        found = list_anchors(host.store, proj.id, session, include_unpinned=include_unpinned)
        return AnchorListResult(
            project=ProjectInfo.of(proj), anchors=[AnchorOut.of(a) for a in found]
        )

    server.add(anchor_pin, title="Pin an anchor", writes=True)
    server.add(anchor_unpin, title="Unpin an anchor", writes=True)
    server.add(anchor_list, title="List pinned anchors", writes=False)
