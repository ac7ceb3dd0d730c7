"""``POST /v1/chat/completions``: the OpenAI chat API, plain and streamed (SSE).

The request runs through the turn pipeline as it came; the server's answer passes
through unchanged, its SSE lines too, with the turn's figures as an SSE comment
(``: x-sakur4-summary …``, which clients skip) just before ``data: [DONE]``. Errors
are OpenAI-shaped; after the stream started, the last ``data:`` event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial

from starlette.requests import Request
from starlette.responses import Response

from sakur4.gateway.errors import ErrorInfo, openai_shape
from sakur4.gateway.serving import Routes, ServedTurn, Wire, read_body
from sakur4.turns.send import DONE
from sakur4.turns.turn import Outcome, Turn


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
        pipeline.sender.chat_stream(served.turn.prepared),
        partial(_outcome_at_done, served.turn),
        WIRE,
    )


async def _outcome_at_done(
    turn: Turn, opened: tuple[AsyncIterator[str], Outcome]
) -> AsyncGenerator[str, None]:
    """The server's lines; at ``[DONE]`` everything it said is in: the outcome is the turn's."""
    lines, outcome = opened
    async for line in lines:
        if line == DONE:
            turn.outcome = outcome
        yield line
