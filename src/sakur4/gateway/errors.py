"""Errors as an OpenAI-compatible client expects them: a JSON body with the right status.

Mapped once here for the whole gateway; no traceback reaches a client.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from sakur4.errors import (
    AnchorBudgetError,
    BackendRefused,
    BackendUnavailable,
    ContextOverflow,
    InputError,
    NotFound,
    Sakur4Error,
    StoreError,
)


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code or kind, "param": None}},
        status_code=status,
    )


def error_response(e: Sakur4Error) -> JSONResponse:
    """The status and body for each branch of Sakur4's error tree."""
    if isinstance(e, AnchorBudgetError):
        return openai_error(413, f"sakur4: {e}", "anchor_budget_error", "anchors_do_not_fit")
    if isinstance(e, ContextOverflow):
        return openai_error(400, f"sakur4: {e}", "exceed_context_size_error")
    if isinstance(e, BackendRefused):
        status = e.status if e.status and 400 <= e.status < 600 else 502
        return openai_error(status, f"sakur4: {e}", "backend_refused")
    if isinstance(e, BackendUnavailable):
        return openai_error(503, f"sakur4: {e}", "backend_unavailable")
    if isinstance(e, InputError):
        return openai_error(400, f"sakur4: {e}", "invalid_request_error")
    if isinstance(e, NotFound):
        return openai_error(404, f"sakur4: {e}", "not_found_error")
    if isinstance(e, StoreError):
        return openai_error(500, f"sakur4: store: {e}", "store_error")
    return openai_error(500, f"sakur4: {e}", "sakur4_error")
