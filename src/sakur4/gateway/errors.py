"""Errors as a client expects them: a JSON body with the right status.

Mapped once for the whole gateway, in two steps: :func:`classify` turns anything a
route raised (Sakur4's error tree, a policy :class:`~sakur4.exposure.Refusal`,
Starlette's 404/405, or an unexpected exception) into an :class:`ErrorInfo`; an
error *shape* renders that for the route's API (:func:`openai_shape` here; another
API's routes bring their own shape). :func:`exception_handlers` installs the
mapping as Starlette exception handlers. No traceback reaches a client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sakur4.errors import (
    AnchorBudgetError,
    BackendRefused,
    BackendUnavailable,
    ContextOverflow,
    InputError,
    NotFound,
    PromptTooLong,
    Sakur4Error,
    SessionHeld,
    StoreError,
    TooLarge,
)
from sakur4.exposure import Refusal

# OpenAI's code for a prompt over the window; OpenCode compacts on it
# (packages/opencode/src/provider/error.ts, ``parseAPICallError``).
OVERFLOW_CODE = "context_length_exceeded"

# A 503 for a backend not linked says when to ask again (RFC 9110 §10.2.3; the OpenAI
# and Anthropic SDKs wait for it): the gateway reaches for its backend again at most
# this many seconds apart (sakur4.gateway.link.RETRY_MAX).
RETRY_AFTER_S = 10
RETRY: Mapping[str, str] = {"Retry-After": str(RETRY_AFTER_S)}


@dataclass(frozen=True)
class ErrorInfo:
    """One error as every API shape needs it: status, a machine kind, a code, a line."""

    status: int
    kind: str
    message: str
    code: str | None = None
    # Headers the status requires: `Allow` on a 405 (RFC 9110 §15.5.6), `Retry-After`
    # on a 503.
    headers: Mapping[str, str] | None = None


class Refused(Exception):
    """A request the exposure policy (or a route's own bound) refuses."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def classify(e: BaseException) -> ErrorInfo:
    """The status and kind for each error a route can raise (anything else: a 500)."""
    if isinstance(e, Refused):
        r = e.refusal
        return ErrorInfo(r.status, r.kind, f"sakur4: {r.message}")
    if isinstance(e, HTTPException):
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return ErrorInfo(e.status_code, kind, f"sakur4: {e.detail}", headers=e.headers)
    if isinstance(e, AnchorBudgetError):
        return ErrorInfo(413, "anchor_budget_error", f"sakur4: {e}", "anchors_do_not_fit")
    # The code OpenCode reads as an overflow (and compacts on), as OpenAI sends it.
    if isinstance(e, PromptTooLong):
        return ErrorInfo(400, "invalid_request_error", f"sakur4: {e}", OVERFLOW_CODE)
    if isinstance(e, ContextOverflow):
        return ErrorInfo(400, "exceed_context_size_error", f"sakur4: {e}", OVERFLOW_CODE)
    if isinstance(e, BackendRefused):
        status = e.status if e.status and 400 <= e.status < 600 else 502
        return ErrorInfo(status, "backend_refused", f"sakur4: {e}")
    if isinstance(e, BackendUnavailable):
        return ErrorInfo(503, "backend_unavailable", f"sakur4: {e}", headers=RETRY)
    if isinstance(e, TooLarge):
        return ErrorInfo(413, "request_too_large", f"sakur4: {e}")
    if isinstance(e, InputError):
        return ErrorInfo(400, "invalid_request_error", f"sakur4: {e}")
    if isinstance(e, NotFound):
        return ErrorInfo(404, "not_found_error", f"sakur4: {e}")
    if isinstance(e, SessionHeld):
        return ErrorInfo(503, "session_held", f"sakur4: {e}", headers=RETRY)
    if isinstance(e, StoreError):
        return ErrorInfo(500, "store_error", f"sakur4: store: {e}")
    if isinstance(e, Sakur4Error):
        return ErrorInfo(500, "sakur4_error", f"sakur4: {e}")
    return ErrorInfo(
        500, "internal_error", "sakur4: internal error (the gateway's log has the details)"
    )


ErrorShape = Callable[[ErrorInfo], Mapping[str, Any]]


def openai_shape(info: ErrorInfo) -> Mapping[str, Any]:
    """The error body OpenAI's API (and its SDKs) use."""
    return {
        "error": {
            "message": info.message,
            "type": info.kind,
            "code": info.code or info.kind,
            "param": None,
        }
    }


def render(info: ErrorInfo, shape: ErrorShape = openai_shape) -> JSONResponse:
    headers = dict(info.headers or {})
    if info.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="sakur4"'
    return JSONResponse(dict(shape(info)), status_code=info.status, headers=headers or None)


def error_response(e: BaseException, shape: ErrorShape = openai_shape) -> JSONResponse:
    return render(classify(e), shape)


def exception_handlers(
    shape_for: Callable[[str], ErrorShape],
) -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """Starlette exception handlers; ``shape_for(path)`` picks each route's error shape.

    Unexpected exceptions are not here: Starlette re-raises those after its 500
    handler (the server then logs them again), so :class:`~sakur4.gateway.app.LastResort`
    answers and logs them once.
    """

    async def handle(request: Request, e: Exception) -> Response:
        return error_response(e, shape_for(request.url.path))

    return {Refused: handle, HTTPException: handle, Sakur4Error: handle}
