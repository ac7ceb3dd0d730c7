"""What a wrap says about several agents on its server (issue 37 item 5): subagents are
agents too, and for ``--agents N`` how many slots and which cache flags the server
needs, from the probe the gateway stored for it (:mod:`sakur4.backends.agents_advice`).
Read-only: a wrap never probes the server itself (the cache experiment replaces what a
slot holds)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sakur4.backends.agents_advice import for_agents
from sakur4.backends.http import normalize_url
from sakur4.probe import last_stored

# Said to a wrap for one agent: the harnesses that run subagents run them on this server.
SUBAGENTS_COUNT = (
    "subagents (Claude Code's Task tool, OpenCode's subagents) and a second terminal "
    "are agents on the same server: `--agents N` says how many slots and which cache "
    "flags it needs for them"
)


def agents_notes(store: Path | str, backend: str, agents: int) -> list[str]:
    """The lines for ``agents`` agents on ``backend``; for one, that subagents count."""
    if agents < 2:
        return [SUBAGENTS_COUNT]
    found = last_stored(store, normalize_url(backend))
    if found is None:
        return [
            f"for {agents} agents: no probe of {backend} is stored yet: run "
            f"`sakur4 probe {backend} --agents {agents}` when it is quiet"
        ]
    return list(for_agents(replace(found, agents=agents)))
