"""A Sakur4 gateway: ``GET /sakur4/gateway`` names itself and the backend it fronts.
Never planned for: the probe says to point at the inference server itself."""

from __future__ import annotations

from collections.abc import Mapping

from sakur4.backends.kinds.base import GATEWAY_IDENTITY, Asked, Identity, Opening, ServerKind
from sakur4.backends.openai_compat import OpenAICompatClient
from sakur4.backends.seam import Backend, Layouts


async def _identify(ask: Asked) -> Identity | None:
    gateway = await ask.get(GATEWAY_IDENTITY)
    if not (isinstance(gateway, Mapping) and "sakur4" in gateway):
        return None
    return Identity(
        "sakur4-gateway",
        version=str(gateway["sakur4"]),
        upstream=str(gateway.get("backend") or "") or None,
    )


def _open(o: Opening) -> Backend:
    s = o.settings
    return OpenAICompatClient(
        o.url, timeout=s.backend_timeout, transport=o.transport, through=o.through
    )


def _layouts(client: Backend) -> Layouts | None:
    return None  # nothing is planned for a gateway


KIND = ServerKind(
    "sakur4-gateway",
    order=10,
    identify=_identify,
    open=_open,
    layouts=_layouts,
    layout="",
    probing="none",
    is_gateway=True,
)
