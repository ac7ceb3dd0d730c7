"""Which kind of inference server is behind a URL, from each one's documented endpoints.

Each kind says how it is identified, in its own file (:mod:`sakur4.backends.kinds`);
this module keeps the names other packages import.
"""

from __future__ import annotations

from sakur4.backends.kinds import identify
from sakur4.backends.kinds.base import (
    GATEWAY_IDENTITY,
    IDENTIFY_TIME_LIMIT,
    BackendKind,
    Identity,
    fingerprint,
)

__all__ = [
    "GATEWAY_IDENTITY",
    "IDENTIFY_TIME_LIMIT",
    "BackendKind",
    "Identity",
    "fingerprint",
    "identify",
]
