"""The server kinds: one file a kind, each defining ``KIND``, a :class:`ServerKind`
that says everything Sakur4 does differently for it (how it is identified, its
client and token layouts, its request fields, how it is read again, where it
resumes, how it is probed, its advice). Found here by listing this package, so a new
kind is one new file; nothing outside this package asks a kind's name.

Identification asks each kind in its ``order``, first match wins (a 404 or an answer
of the wrong shape just moves on); each endpoint is asked once.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping

import httpx

from sakur4.backends.experiment import CheckpointSource
from sakur4.backends.http import HttpBackend
from sakur4.backends.kinds.base import (
    IDENTIFY_TIME_LIMIT,
    UNKNOWN,
    Asked,
    BackendKind,
    Identity,
    Opening,
    ServerKind,
)
from sakur4.backends.resume import ResumeModel
from sakur4.backends.seam import Backend, Layouts
from sakur4.errors import InputError, SettingsError
from sakur4.settings import Settings

_NOT_KINDS = frozenset({"base"})


def found_kinds() -> tuple[ServerKind, ...]:
    """Every kind in this package's files (each defines ``KIND``), in identification order."""
    kinds: list[ServerKind] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_KINDS:
            module = importlib.import_module(f"{__name__}.{info.name}")
            kinds.append(module.KIND)
    return tuple(sorted(kinds, key=lambda k: k.order))


# Every kind, in the order identification asks them.
KINDS: tuple[ServerKind, ...] = found_kinds()
_BY_NAME: Mapping[BackendKind, ServerKind] = {k.name: k for k in KINDS}


def kind_named(name: BackendKind) -> ServerKind | None:
    """The kind of that name (None: no kind is, e.g. "unknown")."""
    return _BY_NAME.get(name)


def server_kind(name: BackendKind) -> ServerKind:
    """The kind of that name; a name no kind has is an error, not a guess."""
    kind = _BY_NAME.get(name)
    if kind is None:
        raise InputError(f"no server kind {name!r}: known are {', '.join(k.name for k in KINDS)}")
    return kind


async def identify(http: HttpBackend, *, time_limit: float = IDENTIFY_TIME_LIMIT) -> Identity:
    """Identify the server behind ``http``; raises BackendUnavailable if it is down."""
    ask = Asked(http, time_limit)
    for kind in KINDS:
        found = await kind.identify(ask)
        if found is not None:
            return found
    return Identity(UNKNOWN)


def open_backend(
    kind: BackendKind,
    url: str,
    settings: Settings,
    transport: httpx.AsyncBaseTransport | None = None,
    *,
    model: str | None = None,
    cache_report: bool = False,
    through: HttpBackend | None = None,
) -> Backend:
    """The client for a server of ``kind`` (``model``: the one the probe found;
    ``cache_report``: SGLang was seen reporting cached tokens; ``through``: the server's
    one client, whose connection it speaks through)."""
    opening = Opening(url, settings, transport, model, cache_report, through)
    return server_kind(kind).open(opening)


def token_layouts(backend: Backend) -> Layouts:
    """The layouts for ``backend``: exact where the server renders and tokenizes chat
    requests for us, else estimated (calibrated on what the server counts). Each kind
    recognises its own client, the most particular first."""
    for kind in KINDS:
        layouts = kind.layouts(backend)
        if layouts is not None:
            return layouts
    raise SettingsError(f"no token layouts for a {type(backend).__name__} backend")


def resume_model(kind: BackendKind, source: CheckpointSource) -> ResumeModel:
    """Where a server of ``kind`` whose probe found ``source`` resumes."""
    return server_kind(kind).resumes(source).model
