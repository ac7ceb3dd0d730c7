"""The harnesses ``sakur4 wrap`` runs, by the word it takes (``claude``, ``opencode``,
``aider``, ``codex``; ``--openai`` for any OpenAI-compatible command): the environment,
flags and temporary files that point one run at the gateway and at ``sakur4 serve``,
with the window and the output cap set (docs/harnesses.md). Each harness's recipe is in
its own file (:class:`~sakur4.harnesses.base.Wrap`); this is the table of them.

A recipe only describes the run; :mod:`sakur4.wrap` writes the files into a temporary
directory and starts the command. Nothing here touches the user's own configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sakur4.errors import SettingsError
from sakur4.harnesses import KNOWN
from sakur4.harnesses.base import TOLD_WINDOW, Launch, McpCommand, Target, Wrap

__all__ = ["HARNESSES", "OPENAI", "TOLD_WINDOW", "McpCommand", "Target", "harness", "launch"]

# The harnesses `sakur4 wrap NAME` runs (or refuses, saying why), by that name.
HARNESSES: dict[str, Wrap] = {
    h.wrap.name: h.wrap for h in KNOWN if h.wrap is not None and h.wrap.executable is not None
}
# The run of the user's own command (``--openai -- CMD``): the wrap with no executable.
OPENAI: Wrap = next(h.wrap for h in KNOWN if h.wrap is not None and h.wrap.executable is None)


def harness(name: str | None) -> Wrap:
    """The harness called ``name`` (None: the OpenAI-compatible command)."""
    if name is None:
        return OPENAI
    found = HARNESSES.get(name)
    if found is None:
        known = ", ".join(HARNESSES)
        raise SettingsError(
            f"unknown harness {name!r}: one of {known}, or --openai -- CMD for another"
        )
    if found.recipe is None:
        raise SettingsError(f"{found.describe}: {found.refusal}")
    return found


def launch(h: Wrap, target: Target, args: Sequence[str], tmp: Path) -> Launch:
    """The run of ``h`` pointed at ``target`` with the user's ``args``."""
    assert h.recipe is not None, h.name
    return h.recipe(target, args, tmp)
