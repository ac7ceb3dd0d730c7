"""Semantic Atlas tools: ``atlas_write``, ``atlas_read`` (SPEC §5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field

from sakur4.mcp.host import ToolHost
from sakur4.mcp.tools.common import MAX_NAME, MAX_PATH, MAX_TEXT, ProjectArg, ProjectInfo
from sakur4.mcp.toolserver import ToolServer

# The Atlas checks against the Ledger (tree-sitter): imported by the tool that runs.
if TYPE_CHECKING:
    from sakur4.atlas import AtlasReading

PathArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH,
        description="the symbol's file, relative to the project root",
    ),
]
QualifiedNameArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_NAME,
        description="the symbol's name as ledger_symbol takes it: qualified "
        "(pkg.mod.Class.method), a dotted tail (Class.method) or bare, within `path`",
    ),
]


class AtlasEntryOut(BaseModel):
    """An Atlas summary, checked against the code as it is now."""

    id: int
    label: str = Field(description="'' when current, '[STALE]' or '[STALE: removed]'")
    status: Literal["current", "stale", "removed"]
    text: str = Field(description="the label and the summary: what a reader must see")
    summary: str
    path: str
    qualified_name: str
    anchor_hash: str = Field(description="the symbol's hash when the summary was written")
    current_signature: str | None = Field(description="what the code says now, when stale")
    current_hash: str | None
    author: str | None
    created_at: str

    @classmethod
    def of(cls, r: AtlasReading) -> AtlasEntryOut:
        e = r.entry
        return cls(
            id=e.id,
            label=r.label,
            status=r.status,
            text=f"{r.label} {e.summary}" if r.label else e.summary,
            summary=e.summary,
            path=e.path,
            qualified_name=e.qualified_name,
            anchor_hash=e.anchor_hash,
            current_signature=r.current_signature,
            current_hash=r.current_hash,
            author=e.author,
            created_at=e.created_at,
        )


class AtlasWriteResult(BaseModel):
    project: ProjectInfo
    id: int
    path: str
    qualified_name: str
    fact_id: int = Field(description="the Ledger fact the summary is anchored to")
    anchor_hash: str


class AtlasReadResult(BaseModel):
    project: ProjectInfo
    entries: list[AtlasEntryOut]


def register(server: ToolServer, host: ToolHost) -> None:
    def atlas_write_tool(
        path: PathArg,
        qualified_name: QualifiedNameArg,
        summary: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)],
        author: Annotated[str | None, Field(max_length=MAX_NAME)] = None,
        project: ProjectArg = None,
    ) -> AtlasWriteResult:
        """Write a summary of a symbol into the Semantic Atlas, anchored to its current
        Ledger fact. The name resolves as in ledger_symbol, within `path`; the result
        gives the full qualified name it matched. Refused unless exactly one symbol in the
        indexed code matches; read back as [STALE] once the code changes."""
        from sakur4.atlas import atlas_write

        proj = host.project(project)
        e = atlas_write(host.store, proj.id, path, qualified_name, summary, author)
        return AtlasWriteResult(
            project=ProjectInfo.of(proj),
            id=e.id,
            path=e.path,
            qualified_name=e.qualified_name,
            fact_id=e.fact_id,
            anchor_hash=e.anchor_hash,
        )

    def atlas_read_tool(
        path: Annotated[
            str | None, Field(max_length=MAX_PATH, description="only this file's entries")
        ] = None,
        qualified_name: Annotated[
            str | None,
            Field(max_length=MAX_NAME, description="only this symbol's (qualified or a tail)"),
        ] = None,
        history: Annotated[bool, Field(description="every entry, not just the newest")] = False,
        project: ProjectArg = None,
    ) -> AtlasReadResult:
        """Read Atlas summaries, each checked against the code now: unchanged, [STALE]
        (with the current signature attached), or [STALE: removed]. An anchored file
        edited since it was indexed is re-indexed first (that file only), so an edit
        shows without calling ledger_index."""
        from sakur4.atlas import atlas_read

        proj = host.project(project)
        readings = atlas_read(host.store, proj.id, path, qualified_name, history=history)
        return AtlasReadResult(
            project=ProjectInfo.of(proj), entries=[AtlasEntryOut.of(r) for r in readings]
        )

    server.add(atlas_write_tool, name="atlas_write", title="Write an Atlas summary", writes=True)
    # Ordered as a write: it may re-index the files it reads (their facts change for
    # every later call), though nothing a caller wrote changes: read-only to a client.
    server.add(
        atlas_read_tool,
        name="atlas_read",
        title="Read Atlas summaries",
        writes=True,
        read_only_hint=True,
    )
