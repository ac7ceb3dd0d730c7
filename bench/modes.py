"""The benchmark's server modes beyond the two ``sakur4 demo`` runs (its ring and
``--swa-full``, :mod:`sakur4.demo.compare`): the server's default flags, KV shifting
and a recurrent (hybrid) model; the ``--modes`` key of each, the model a mode's
server runs and the checkpoint rules its simulation uses."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sakur4.backends.launcher import ServerFlags
from sakur4.backends.ring import CheckpointRules
from sakur4.demo.compare import Mode, ring, swa_full
from sakur4.settings import Settings


def default_flags(window: int) -> Mode:
    """The server's defaults (no ``-cms``: b11434's ``--help`` gives 8192, and 32
    checkpoints): what a user who skips the probe's advice runs."""
    return Mode("default", "default flags (-cms 8192, 32 checkpoints)", ServerFlags(ctx=window))


def cache_reuse(window: int, chunk: int = 256) -> Mode:
    """``--swa-full --cache-reuse N``: also shifts the KV of cached chunks of at least
    N tokens that reappear later in the prompt (text removed before them is free)."""
    return Mode(
        "cache-reuse",
        f"swa-full cache-reuse {chunk}",
        ServerFlags(ctx=window, swa_full=True, cache_reuse=chunk),
    )


@dataclass(frozen=True, slots=True)
class OwnModel:
    """A model a mode's server runs instead of the set-up's: a file under
    ``<cache>/models``, whether its memory is recurrent, and how to get it."""

    file: str
    recurrent: bool
    how: str

    def path(self, settings: Settings) -> Path:
        target = settings.cache_dir / "models" / self.file
        if not target.is_file():
            raise ValueError(f"{target} is missing: {self.how}")
        return target


# The tiny random-weight hybrid of scripts/build-recurrent-model.py (docs/DESIGN.md,
# "A recurrent model, built here"): its text is noise, its cache behaviour the server's.
LFM2 = OwnModel(
    "lfm2-tiny-random.gguf",
    recurrent=True,
    how="scripts/setup-tests builds it (scripts/build-recurrent-model.py, with vLLM's gguf)",
)
RECURRENT_NAME = "recurrent lfm2 (tiny, RANDOM weights: cache behaviour only)"


def recurrent(window: int) -> Mode:
    """The recurrent model on the server's default flags (-cms 8192, 32 checkpoints)."""
    return Mode("recurrent", f"{RECURRENT_NAME}, default flags", ServerFlags(ctx=window))


def recurrent_cms256(window: int) -> Mode:
    """The recurrent model with ``-cms 256``: a checkpoint at every user message."""
    flags = ServerFlags(ctx=window, checkpoint_min_step=256)
    return Mode("recurrent-cms256", f"{RECURRENT_NAME}, -cms 256", flags)


MODES = {
    "default": default_flags,
    "ring": ring,
    "swa-full": swa_full,
    "cache-reuse": cache_reuse,
    "recurrent": recurrent,
    "recurrent-cms256": recurrent_cms256,
}
OWN_MODELS = {"recurrent": LFM2, "recurrent-cms256": LFM2}


def mode(key: str, window: int) -> Mode:
    try:
        return MODES[key](window)
    except KeyError:
        raise ValueError(f"unknown server mode {key!r} (one of {', '.join(MODES)})") from None


def server_settings(m: Mode, settings: Settings) -> Settings:
    """The settings a mode's servers start from: its own model when it has one."""
    own = OWN_MODELS.get(m.key)
    return settings.model_copy(update={"model": own.path(settings)}) if own else settings


def checkpoint_rules(m: Mode) -> CheckpointRules:
    """The rules the simulator predicts a mode's server by: the flags' (Gemma 3's
    sliding window) or, for a recurrent model, the recurrent state's with the same
    ``-cms`` and ring size (no window: it resumes only at a checkpoint or its end)."""
    own = OWN_MODELS.get(m.key)
    if own is not None and own.recurrent:
        return replace(m.flags.rules(n_swa=0), recurrent=True)
    return m.flags.rules()


def model_file(m: Mode) -> str | None:
    """The file name of a mode's own model (None: the set-up's)."""
    own = OWN_MODELS.get(m.key)
    return own.file if own else None
