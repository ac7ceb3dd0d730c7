"""TabbyAPI: ``GET /v1/model`` says ``owned_by: "tabbyAPI"`` (``parameters.max_seq_len``);
served as any OpenAI-compatible server otherwise."""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.kinds.base import (
    ESTIMATED,
    Asked,
    Identity,
    ServerKind,
    as_int,
    unreported_window,
)
from sakur4.backends.kinds.generic import generic_layouts, open_generic


async def _identify(ask: Asked) -> Identity | None:
    tabby = await ask.get("/v1/model")
    if not (isinstance(tabby, Mapping) and tabby.get("owned_by") == "tabbyAPI"):
        return None
    params = tabby.get("parameters")
    params = params if isinstance(params, Mapping) else {}
    return Identity("tabbyapi", model=str(tabby.get("id")), n_ctx=as_int(params.get("max_seq_len")))


KIND = ServerKind(
    "tabbyapi",
    order=60,
    identify=_identify,
    open=open_generic,
    layouts=generic_layouts,
    layout=ESTIMATED,
    window_advice=unreported_window,
)
