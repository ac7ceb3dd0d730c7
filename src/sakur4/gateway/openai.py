"""``POST /v1/chat/completions``: the OpenAI chat API, plain and streamed (SSE).

The request runs through the turn pipeline as it came; the server's answer passes
through unchanged, its SSE lines too, with the turn's figures as an SSE comment
(``: x-sakur4-summary …``, which clients skip) just before ``data: [DONE]``. Errors
are OpenAI-shaped; after the stream started, the last ``data:`` event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from functools import partial
from pathlib import PurePath
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sakur4.backends.kinds.base import ServerKind
from sakur4.gateway.errors import ErrorInfo, openai_shape
from sakur4.gateway.serving import Routes, ServedTurn, Wire, read_body
from sakur4.turns.send import Streamed
from sakur4.turns.turn import Outcome, Turn


def clean_model_id(name: str) -> str:
    """A model file's name without its folder and ``.gguf`` (``gemma3-270m-q4_k_m``);
    any other name as it is (an ``--alias``, a repository id)."""
    if name.lower().endswith(".gguf"):
        return PurePath(name.replace("\\", "/")).stem
    return name


def served_listing(listing: Mapping[str, Any], server: ServerKind) -> dict[str, Any]:
    """The backend's ``/v1/models`` as the gateway serves it.

    A llama-server started with ``-m FILE`` lists its model by the file's path, which
    the harnesses then show as the model's name (Claude Code warns of an unrecognised
    model): it is listed by the file's stem instead (issue 41). llama-server serves its
    one model whatever name a request gives, so the path, the stem or any other name is
    still accepted (``ServerKind.lists_model_path``). Other servers check the name (vLLM
    answers 404 to another): their listing passes through."""
    out = dict(listing)
    data = listing.get("data")
    if not server.lists_model_path or not isinstance(data, list) or len(data) != 1:
        return out
    entries = [dict(e) if isinstance(e, Mapping) else e for e in data]
    for e in entries:
        if isinstance(e, dict) and isinstance(e.get("id"), str):
            e["id"] = clean_model_id(e["id"])
    out["data"] = entries
    models = listing.get("models")
    if isinstance(models, list):
        out["models"] = [
            {
                k: clean_model_id(v) if k in ("name", "model") and isinstance(v, str) else v
                for k, v in m.items()
            }
            if isinstance(m, Mapping)
            else m
            for m in models
        ]
    return out


DONE = "data: [DONE]\n\n"


def _error_event(info: ErrorInfo) -> str:
    return f"data: {json.dumps(dict(openai_shape(info)))}\n\n"


# An SSE comment (clients skip it) while the server prefills (see serving.OPEN_GRACE).
WIRE = Wire(
    "answer", lambda line: line == DONE, _error_event, ": keep-alive\n\n", summary_comment=True
)


async def chat(routes: Routes, request: Request) -> Response:
    """One chat turn, plain or streamed (errors raise, for the app's mapping)."""
    pipeline = await routes.ready()
    body = await read_body(request, routes.policy)
    project = routes.project(request)
    session = request.headers.get("x-sakur4-session")
    served = await ServedTurn.open(pipeline, request, body, project, session)
    if not body.get("stream"):

        async def send(turn: Turn) -> dict[str, object]:
            answer, turn.outcome = await pipeline.sender.chat(turn.prepared)
            return dict(answer)

        return await served.answer(send)
    return await served.stream(
        pipeline.sender.chat_stream(served.turn.prepared), partial(_framed, served.turn), WIRE
    )


async def _framed(turn: Turn, answer: AsyncIterator[Streamed]) -> AsyncGenerator[str, None]:
    """The server's chunks as SSE lines, as it wrote them; at the outcome everything it
    said is in: the outcome is the turn's, and ``[DONE]`` ends the answer."""
    options = turn.prepared.body.get("stream_options") or {}
    wants_usage = bool(options.get("include_usage"))
    async for piece in answer:
        if isinstance(piece, Outcome):
            turn.outcome = piece
            yield DONE
        elif wants_usage or piece.payload.get("choices") or "usage" not in piece.payload:
            yield f"data: {piece.data}\n\n"
        # else: the usage chunk, which the client did not ask for
