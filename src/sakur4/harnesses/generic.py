"""Any other client: the harness no known one claims. Its user messages are kept whole
and Unclassified (never guessed; structure decides the rest, episodes/natures.py), and
``sakur4 wrap --openai -- CMD`` runs any OpenAI-compatible command with the variables
the openai SDKs and LiteLLM read. Asked last."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sakur4.harnesses.base import GENERIC, Harness, Launch, Target, Wrap

DISPLAY = "an OpenAI-compatible command"


def _recipe(t: Target, args: Sequence[str], tmp: Path) -> Launch:
    env = {
        "OPENAI_BASE_URL": t.openai_base,  # the openai SDKs
        "OPENAI_API_BASE": t.openai_base,  # LiteLLM and older clients
        "OPENAI_API_KEY": t.key,
        "OPENAI_MODEL": t.model,
    }
    notes = (
        "an unknown command: its window and output cap are its own settings; "
        "set the output cap, or a small model may write until the window is full",
    )
    return Launch(tuple(args), env, notes=notes)


# Its wrap has no executable: the command is the user's (--openai).
HARNESS = Harness(GENERIC, DISPLAY, order=1000, wrap=Wrap("openai", DISPLAY, None, _recipe))
