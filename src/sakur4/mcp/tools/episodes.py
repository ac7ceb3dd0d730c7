"""Episodic memory tools: ``remember``, ``recall``, ``open_fold`` (SPEC §6)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AwareDatetime, BaseModel, Field

from sakur4.bounds import RECALL_K, WIRE_ID
from sakur4.episodes import Episode, open_fold, remember
from sakur4.errors import BackendError
from sakur4.mcp.host import ToolHost
from sakur4.mcp.tools.common import MAX_NAME, MAX_QUERY, MAX_TEXT, ProjectArg, ProjectInfo
from sakur4.mcp.toolserver import ToolServer
from sakur4.vocabulary import Kind

if TYPE_CHECKING:
    from sakur4.episodes.recall import RecallHit

log = logging.getLogger(__name__)

SessionArg = Annotated[
    str | None,
    Field(max_length=MAX_NAME, description="Session the note belongs to; default: 'notes'."),
]


class EpisodeOut(BaseModel):
    """One episode: a message, tool call, tool result or note."""

    id: int
    session: str
    turn: int
    seq: int
    role: str
    kind: str
    nature: str | None = Field(description="what it is (instruction, request, result…)")
    tool_name: str | None
    tool_call_id: str | None
    tier: str = Field(description="live, masked, referenced, archived (or dropped)")
    tokens: int
    created_at: str
    depends_on: list[int] = Field(description="episodes this one needs (a result needs its call)")
    content: str | None
    truncated: bool = Field(description="content was cut to max_chars; open_fold shows it all")

    @classmethod
    def of(cls, e: Episode, max_chars: int | None = None) -> EpisodeOut:
        return cls(**e.as_dict(max_chars))


class RememberResult(BaseModel):
    project: ProjectInfo
    episode_id: int
    session: str
    embedded: bool = Field(description="a vector was stored for similarity recall")
    warning: str | None = Field(None, description="the note is stored, but something degraded")


class HitOut(BaseModel):
    score: float = Field(description="fused rank score (higher is better)")
    lexical_rank: int | None
    bm25: float | None = Field(description="FTS5 bm25: lower (more negative) matches better")
    vector_rank: int | None
    distance: float | None = Field(description="cosine distance to the query")
    episode: EpisodeOut

    @classmethod
    def of(cls, h: RecallHit, max_chars: int) -> HitOut:
        return cls(
            score=h.score,
            lexical_rank=h.lexical_rank,
            bm25=h.bm25,
            vector_rank=h.vector_rank,
            distance=h.distance,
            episode=EpisodeOut.of(h.episode, max_chars),
        )


class RecallResult(BaseModel):
    project: ProjectInfo
    mode: Literal["lexical", "hybrid"] = Field(description="hybrid = BM25 + vector similarity")
    hits: list[HitOut] = Field(description="best first")
    warning: str | None = None


class FoldResult(BaseModel):
    project: ProjectInfo
    episode: EpisodeOut


def register(server: ToolServer, host: ToolHost) -> None:
    def remember_tool(
        text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT, description="the note")],
        session: SessionArg = None,
        project: ProjectArg = None,
    ) -> RememberResult:
        """Store a note in the project's episodic memory, to be found later by `recall`
        (it survives context compaction). Returns the note's episode id."""
        proj = host.project(project)
        eid = remember(host.store, proj.id, text, session)
        embedded, warning = False, None
        if host.embedder is not None:
            # Here, not at the top: vectors load numpy, which `initialize` need not wait for.
            from sakur4.episodes.vectors import embed_episodes

            try:
                embedded = embed_episodes(host.store, proj.id, [eid], host.embedder) == 1
            except BackendError as e:
                warning = f"note stored, but not embedded (recall finds it by its words): {e}"
                log.warning("%s", warning)
        stored = open_fold(host.store, proj.id, eid)
        return RememberResult(
            project=ProjectInfo.of(proj),
            episode_id=eid,
            session=stored.session,
            embedded=embedded,
            warning=warning,
        )

    def recall_tool(
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY)],
        k: Annotated[int, Field(ge=RECALL_K.lo, le=RECALL_K.hi, description="how many hits")] = 10,
        kind: Annotated[Kind | None, Field(description="only this kind of episode")] = None,
        session: Annotated[str | None, Field(max_length=MAX_NAME)] = None,
        since: Annotated[AwareDatetime | None, Field(description="ISO time, with zone")] = None,
        until: Annotated[AwareDatetime | None, Field(description="ISO time, with zone")] = None,
        max_chars: Annotated[
            int, Field(ge=0, le=MAX_TEXT, description="cut each hit's content to this")
        ] = 2000,
        project: ProjectArg = None,
    ) -> RecallResult:
        """Search the project's episodes (notes, messages, tool calls and results, folded
        ones included) by words (BM25), plus similarity when an embedder is configured.
        Each hit shows its scores; long contents are cut to max_chars (see open_fold)."""
        from sakur4.episodes.recall import recall  # numpy, on the first recall

        proj = host.project(project)
        warning = None
        embedder = host.embedder

        def search() -> list[RecallHit]:
            return recall(
                host.store,
                proj.id,
                query,
                k,
                kind=kind,
                session=session,
                since=since,
                until=until,
                embedder=embedder,
            )

        try:
            hits = search()
        except BackendError as e:
            if embedder is None:
                raise
            warning = f"similarity search failed, words only: {e}"
            log.warning("%s", warning)
            embedder = None
            hits = search()
        return RecallResult(
            project=ProjectInfo.of(proj),
            mode="hybrid" if embedder is not None else "lexical",
            hits=[HitOut.of(h, max_chars) for h in hits],
            warning=warning,
        )

    def open_fold_tool(
        episode_id: Annotated[
            int, Field(ge=WIRE_ID.lo, le=WIRE_ID.hi, description="id shown in a stub or reference")
        ],
        project: ProjectArg = None,
    ) -> FoldResult:
        """The full content of an episode the context engine folded away (a Masked stub or
        a Referenced line names its id), or of any episode of this project."""
        proj = host.project(project)
        episode = open_fold(host.store, proj.id, episode_id)
        return FoldResult(project=ProjectInfo.of(proj), episode=EpisodeOut.of(episode))

    server.add(remember_tool, name="remember", title="Remember a note", writes=True)
    server.add(recall_tool, name="recall", title="Recall episodes", writes=False)
    server.add(open_fold_tool, name="open_fold", title="Open a folded episode", writes=False)
