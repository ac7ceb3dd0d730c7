"""The coding-agent harnesses: one file a harness, each defining ``HARNESS``, a
:class:`~sakur4.harnesses.base.Harness` that says everything Sakur4 does differently for
it (how it is recognised on the wire, what the parts of its messages are, the cache
churn it causes, its own compaction request, how ``sakur4 wrap`` runs it). Found here
by listing this package, so a new harness is one new file; nothing outside this package
asks a harness's name. Beside them: how ``wrap`` runs one (``recipes``, ``save``), finds
the servers it needs (``find``), and serves a compaction request (``compaction``).

The harnesses are asked in their ``order``, the generic one last; first match wins.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping

from sakur4.harnesses.base import Harness, Repair, VolatileLine

# This package's modules that are not a harness (they ask the registry).
_NOT_HARNESSES = frozenset({"base", "compaction", "find", "recipes", "save"})


def found_harnesses() -> tuple[Harness, ...]:
    """Every harness in this package's files (each defines ``HARNESS``), in order."""
    found: list[Harness] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_HARNESSES:
            module = importlib.import_module(f"{__name__}.{info.name}")
            found.append(module.HARNESS)
    return tuple(sorted(found, key=lambda h: h.order))


# Every harness, in the order they are asked.
KNOWN: tuple[Harness, ...] = found_harnesses()
_BY_NAME: Mapping[str, Harness] = {h.name: h for h in KNOWN}

# The openings of messages that carry files whole, every harness's.
FILE_MESSAGES: tuple[str, ...] = tuple(o for h in KNOWN for o in h.file_messages)
# The churn repairs some harness needs, each once, in the order first declared.
REPAIRS: tuple[Repair, ...] = tuple(dict.fromkeys(r for h in KNOWN for r in h.repairs))
# The volatile lines harnesses open their system prompts with.
VOLATILE: tuple[VolatileLine, ...] = tuple(h.volatile for h in KNOWN if h.volatile)


def harness_named(name: str) -> Harness | None:
    """The harness of that id (None: no harness is)."""
    return _BY_NAME.get(name)


def own_session(headers: Mapping[str, str]) -> str | None:
    """The session a harness named in its own headers (None: none did)."""
    for h in KNOWN:
        named = h.session.named(headers) if h.session is not None else None
        if named is not None:
            return named
    return None
