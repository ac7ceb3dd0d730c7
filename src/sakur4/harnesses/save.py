"""``sakur4 wrap HARNESS --save``: the run's configuration written into the harness's own
configuration files, so the harness reaches the gateway when started by itself.

Only the keys Sakur4 sets change; everything else in the files is kept. A file that is
not plain JSON (comments, a syntax error) is refused with its path, and nothing is
written. Without ``--save`` nothing here runs: a wrapped run changes no file of the
user's (docs/harnesses.md).

Where each harness reads its user-level configuration is in its own file (its
``Wrap.saved``: Claude Code's ``settings.json`` and ``.claude.json``, OpenCode's
``opencode.json``); a harness without one says why (``Wrap.save_refusal``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sakur4.errors import SettingsError
from sakur4.harnesses.base import Edit, Launch, Wrap

__all__ = ["Edit", "edits", "merged", "refusal", "save"]


def refusal(h: Wrap) -> str | None:
    """Why ``--save`` cannot write ``h``'s configuration (None: it can)."""
    if h.saved is not None:
        return None
    return h.save_refusal or (
        f"{h.describe} has no configuration file Sakur4 knows: set its variables yourself"
    )


def edits(h: Wrap, run: Launch, environ: Mapping[str, str]) -> list[Edit]:
    """The files ``run`` (a launch without a project header) is saved into."""
    if h.saved is None:
        raise SettingsError(refusal(h) or h.name)
    return h.saved(run, environ)


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8") or "{}")
    except ValueError as e:
        raise SettingsError(f"{path} is not plain JSON ({e}): not changed, nothing saved") from e
    if not isinstance(found, dict):
        raise SettingsError(f"{path} does not hold a JSON object: not changed, nothing saved")
    return found


def merged(current: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with ``keys`` set; mappings merged one level down."""
    out = dict(current)
    for key, value in keys.items():
        old = out.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            out[key] = {**old, **value}
        else:
            out[key] = value
    return out


def save(edit_list: list[Edit]) -> list[Path]:
    """Apply every edit, or none: all files are read (and refused) before any is written."""
    new = [(e.path, merged(_read(e.path), e.keys)) for e in edit_list]
    for path, data in new:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".sakur4-part")
        part.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(part, path)
    return [path for path, _ in new]
