"""The current project's memory from the command line: ``sakur4 recall``,
``remember``, ``episodes``, ``open-fold``, ``embed``, ``anchor`` and ``atlas``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from sakur4.anchors import PinnedAnchor, list_anchors, pin_anchor, unpin_anchor
from sakur4.atlas import AtlasReading, atlas_read, atlas_write
from sakur4.bounds import COUNT, ID, PRIORITY, RECALL_K
from sakur4.cli.common import (
    CliError,
    bounded,
    current_project,
    emit_json,
    known_project,
    opened,
    reading,
    settings,
    table,
)
from sakur4.embedders import make_embedder
from sakur4.episodes import (
    KINDS,
    Episode,
    embed_episodes,
    embed_pending,
    open_fold,
    recall,
    remember,
    session_episodes,
)
from sakur4.errors import BackendError, InputError, NotFound

_AGO = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def _when(value: str | None) -> datetime | None:
    """``2h`` / ``3d`` (that long ago) or an ISO 8601 time (UTC when no zone is given)."""
    if value is None:
        return None
    m = _AGO.match(value.strip())
    if m:
        return datetime.now(UTC) - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        when = datetime.fromisoformat(value)
    except ValueError as e:
        raise InputError(f"{value!r} is neither a duration like 2h/3d nor an ISO time") from e
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _preview(text: str | None, width: int = 70) -> str:
    if text is None:
        return "(dropped)"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _episode_json(e: Episode) -> dict[str, Any]:
    return {
        "id": e.id,
        "session": e.session,
        "turn": e.turn,
        "seq": e.seq,
        "role": e.role,
        "kind": e.kind,
        "tool_name": e.tool_name,
        "tier": e.tier,
        "tokens": e.tokens,
        "created_at": e.created_at,
        "depends_on": list(e.depends_on),
        "content": e.content,
    }


@click.command("recall")
@click.argument("query")
@click.option(
    "-k",
    "k",
    type=bounded(RECALL_K),
    default=10,
    show_default=True,
    help="How many episodes to return.",
)
@click.option("--kind", type=click.Choice(KINDS), help="Only episodes of this kind.")
@click.option("--session", help="Only this session's episodes.")
@click.option("--since", help="Only episodes since then: 2h, 3d, or an ISO time.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def recall_cmd(
    ctx: click.Context,
    query: str,
    k: int,
    kind: Any,
    session: str | None,
    since: str | None,
    as_json: bool,
) -> None:
    """Search this project's episodes: BM25, plus vectors when an embedder is set."""
    s = settings(ctx)
    embedder = make_embedder(s)
    with opened(s) as store:
        proj = current_project(store, s)
        hits = recall(
            store, proj.id, query, k, kind=kind, session=session, since=_when(since),
            embedder=embedder,
        )  # fmt: skip
    mode = f"hybrid ({embedder.name})" if embedder else "lexical (no embedder configured)"
    if as_json:
        emit_json(
            {
                "mode": mode,
                "hits": [
                    {
                        "score": h.score,
                        "lexical_rank": h.lexical_rank,
                        "bm25": h.bm25,
                        "vector_rank": h.vector_rank,
                        "distance": h.distance,
                        "episode": _episode_json(h.episode),
                    }
                    for h in hits
                ],
            }
        )
        return
    click.echo(f"recall: {mode}")
    if not hits:
        click.echo("no matching episodes")
        return
    rows = [
        {
            "id": h.episode.id,
            "score": f"{h.score:.4f}",
            "bm25": "-" if h.bm25 is None else f"#{h.lexical_rank} {h.bm25:.2f}",
            "vector": "-" if h.distance is None else f"#{h.vector_rank} {h.distance:.3f}",
            "kind": h.episode.kind,
            "tier": h.episode.tier,
            "session": h.episode.session,
            "text": _preview(h.episode.content),
        }
        for h in hits
    ]
    click.echo(table(rows, ["id", "score", "bm25", "vector", "kind", "tier", "session", "text"]))


@click.command("remember")
@click.argument("text")
@click.option("--session", help="Attach the note to this session.")
@click.pass_context
def remember_cmd(ctx: click.Context, text: str, session: str | None) -> None:
    """Store a note in this project's memory (found by recall)."""
    s = settings(ctx)
    embedder = make_embedder(s)
    with opened(s) as store:
        proj = current_project(store, s)
        note = remember(store, proj.id, text, session)
        click.echo(f"note {note} stored")
        if embedder is not None:
            try:
                embed_episodes(store, proj.id, [note], embedder)
            except BackendError as e:
                raise CliError(f"note {note} stored, but not embedded: {e}") from e


@click.command("episodes")
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def episodes_cmd(ctx: click.Context, session: str, as_json: bool) -> None:
    """Show SESSION's transcript as stored: order, kind, tier, tokens."""
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        eps = session_episodes(store, proj.id, session) if store and proj else []
    if as_json:
        emit_json([_episode_json(e) for e in eps])
        return
    if not eps:
        click.echo(f"no episodes in session {session!r} of this project")
        return
    rows = [
        {
            "id": e.id,
            "seq": e.seq,
            "turn": e.turn,
            "kind": e.kind,
            "tier": e.tier,
            "tokens": e.tokens,
            "text": _preview(e.content, 60),
        }
        for e in eps
    ]
    click.echo(table(rows, ["id", "seq", "turn", "kind", "tier", "tokens", "text"]))


@click.command("open-fold")
@click.argument("episode_id", type=bounded(ID))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def open_fold_cmd(ctx: click.Context, episode_id: int, as_json: bool) -> None:
    """Print the full content of an episode, whatever its tier (unless dropped)."""
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        if store is None or proj is None:
            raise NotFound(f"no episode {episode_id} in this project (nothing recorded yet)")
        e = open_fold(store, proj.id, episode_id)
    if as_json:
        emit_json(_episode_json(e))
    else:
        click.echo(e.content or "")


@click.command("embed")
@click.option("--limit", type=bounded(COUNT), help="Embed at most this many episodes.")
@click.pass_context
def embed_cmd(ctx: click.Context, limit: int | None) -> None:
    """Embed this project's episodes that have no vector yet (SAKUR4_EMBEDDER)."""
    s = settings(ctx)
    embedder = make_embedder(s)
    if embedder is None:
        raise CliError("no embedder configured: set SAKUR4_EMBEDDER to 'local' or a URL")
    with opened(s) as store:
        n = embed_pending(store, current_project(store, s).id, embedder, limit)
    click.echo(f"embedded {n} episode(s) with {embedder.name}")


@click.group("anchor")
def anchor_group() -> None:
    """Pin, unpin and list the constraints the agent must never lose."""


def _anchor_json(a: PinnedAnchor) -> dict[str, Any]:
    return {
        "id": a.id,
        "session": a.session,
        "priority": a.priority,
        "text": a.text,
        "pinned_at": a.pinned_at,
        "unpinned_at": a.unpinned_at,
    }


@anchor_group.command("pin")
@click.argument("text")
@click.option(
    "--priority", type=bounded(PRIORITY), default=0, show_default=True, help="Higher comes first."
)
@click.option("--session", help="Pin for this session only (default: the whole project).")
@click.pass_context
def anchor_pin(ctx: click.Context, text: str, priority: int, session: str | None) -> None:
    """Pin TEXT as a constraint."""
    s = settings(ctx)
    with opened(s) as store:
        a = pin_anchor(
            store, current_project(store, s).id, text, priority=priority, session=session
        )
    click.echo(f"anchor {a.id} pinned (priority {a.priority})")


@anchor_group.command("unpin")
@click.argument("anchor_id", type=bounded(ID))
@click.pass_context
def anchor_unpin(ctx: click.Context, anchor_id: int) -> None:
    """Unpin anchor ANCHOR_ID."""
    s = settings(ctx)
    with opened(s) as store:
        unpin_anchor(store, current_project(store, s).id, anchor_id)
    click.echo(f"anchor {anchor_id} unpinned")


@anchor_group.command("list")
@click.option("--session", help="Include this session's own anchors.")
@click.option("--all", "include_unpinned", is_flag=True, help="Include unpinned anchors.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def anchor_list(
    ctx: click.Context, session: str | None, include_unpinned: bool, as_json: bool
) -> None:
    """List the anchors in force, highest priority first."""
    s = settings(ctx)
    with reading(s) as store:
        proj = known_project(store, s)
        anchors = (
            list_anchors(store, proj.id, session, include_unpinned=include_unpinned)
            if store and proj
            else []
        )
    if as_json:
        emit_json([_anchor_json(a) for a in anchors])
    elif anchors:
        rows = [{**_anchor_json(a), "session": a.session or "(all)"} for a in anchors]
        cols = ["id", "priority", "session", "text"] + (["unpinned_at"] if include_unpinned else [])
        click.echo(table(rows, cols))
    else:
        click.echo("no anchors pinned")


@click.group("atlas")
def atlas_group() -> None:
    """Summaries anchored to Ledger symbols, checked against the code on every read."""


def _reading_json(r: AtlasReading) -> dict[str, Any]:
    return {
        "id": r.entry.id,
        "path": r.entry.path,
        "qualified_name": r.entry.qualified_name,
        "status": r.status,
        "label": r.label,
        "summary": r.entry.summary,
        "author": r.entry.author,
        "written_at": r.entry.created_at,
        "anchor_hash": r.entry.anchor_hash,
        "current_hash": r.current_hash,
        "current_signature": r.current_signature,
    }


@atlas_group.command("write")
@click.argument("path")
@click.argument("qualified_name")
@click.argument("summary")
@click.option("--author", help="Who wrote the summary (a model name, a person).")
@click.pass_context
def atlas_write_cmd(
    ctx: click.Context, path: str, qualified_name: str, summary: str, author: str | None
) -> None:
    """Store SUMMARY about symbol QUALIFIED_NAME in PATH (relative to the project root).

    The symbol must be in the Ledger (`sakur4 index`): the summary is anchored to its
    current fact and comes back [STALE] once the code changes."""
    s = settings(ctx)
    with opened(s) as store:
        e = atlas_write(store, current_project(store, s).id, path, qualified_name, summary, author)
    click.echo(f"atlas entry {e.id} anchored to {e.path}:{e.qualified_name} ({e.anchor_hash[:12]})")


@atlas_group.command("read")
@click.argument("path", required=False)
@click.argument("qualified_name", required=False)
@click.option("--history", is_flag=True, help="Every entry ever written, not only the newest.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def atlas_read_cmd(
    ctx: click.Context, path: str | None, qualified_name: str | None, history: bool, as_json: bool
) -> None:
    """Read Atlas entries (all, a file's, or a symbol's), each checked for staleness."""
    s = settings(ctx)
    with opened(s) as store:
        pid = current_project(store, s).id
        readings = atlas_read(store, pid, path, qualified_name, history=history)
    if as_json:
        emit_json([_reading_json(r) for r in readings])
        return
    if not readings:
        click.echo("no atlas entries")
        return
    for r in readings:
        label = f"{r.label} " if r.label else ""
        click.echo(f"{label}{r.entry.path}:{r.entry.qualified_name} (entry {r.entry.id})")
        click.echo(f"  {r.entry.summary}")
        if r.status == "stale":
            click.echo(f"  current: {r.current_signature}  [{(r.current_hash or '')[:12]}]")


def register(cli: click.Group) -> None:
    for command in (recall_cmd, remember_cmd, episodes_cmd, open_fold_cmd, embed_cmd):
        cli.add_command(command)
    cli.add_command(anchor_group)
    cli.add_command(atlas_group)
