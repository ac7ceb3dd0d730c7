"""The current project's episodic memory from the command line: ``sakur4 recall``,
``remember``, ``episodes``, ``open-fold`` and ``embed``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from sakur4.bounds import COUNT, ID, RECALL_K
from sakur4.cli.common import (
    bounded,
    current_project,
    emit_json,
    known_project,
    opened,
    reading,
    settings,
    table,
)
from sakur4.cli.errors import CliError
from sakur4.embedders import make_embedder
from sakur4.episodes import open_fold, remember, session_episodes
from sakur4.errors import BackendError, InputError, NotFound
from sakur4.vocabulary import Kind

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
@click.option(
    "--kind", type=click.Choice([k.value for k in Kind]), help="Only episodes of this kind."
)
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
    from sakur4.episodes.recall import recall  # numpy: only the commands that embed or search

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
                        "episode": h.episode.as_dict(),
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
            "tier": h.episode.tier.label,
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
            from sakur4.episodes.vectors import embed_episodes

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
        emit_json([e.as_dict() for e in eps])
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
            "tier": e.tier.label,
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
        emit_json(e.as_dict())
    else:
        click.echo(e.content or "")


@click.command("embed")
@click.option("--limit", type=bounded(COUNT), help="Embed at most this many episodes.")
@click.pass_context
def embed_cmd(ctx: click.Context, limit: int | None) -> None:
    """Embed this project's episodes that have no vector yet (SAKUR4_EMBEDDER)."""
    from sakur4.episodes.vectors import embed_pending

    s = settings(ctx)
    embedder = make_embedder(s)
    if embedder is None:
        raise CliError("no embedder configured: set SAKUR4_EMBEDDER to 'local' or a URL")
    with opened(s) as store:
        n = embed_pending(store, current_project(store, s).id, embedder, limit)
    click.echo(f"embedded {n} episode(s) with {embedder.name}")
