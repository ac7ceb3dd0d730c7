"""``sakur4 wrap HARNESS --save``: the run's configuration written into the harness's own
configuration files, so the harness reaches the gateway when started by itself.

Only the keys Sakur4 sets change; everything else in the files is kept. A file that is
not plain JSON (comments, a syntax error) is refused with its path, and nothing is
written. Without ``--save`` nothing here runs: a wrapped run changes no file of the
user's (docs/harnesses.md).

Where each harness reads its user-level configuration:
- Claude Code: ``settings.json`` (its ``env``) and ``.claude.json`` (``mcpServers``,
  the user scope of ``claude mcp add``), in ``CLAUDE_CONFIG_DIR`` when set, else
  ``~/.claude/settings.json`` and ``~/.claude.json`` (code.claude.com/docs/en/settings).
- OpenCode: ``opencode.json`` in ``$XDG_CONFIG_HOME/opencode`` (``~/.config/opencode``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sakur4.errors import SettingsError
from sakur4.harnesses.recipes import Harness, Launch

# The run's variables that belong to this run only, not to a saved configuration.
RUN_ONLY = ("ANTHROPIC_CUSTOM_HEADERS",)


@dataclass(frozen=True, slots=True)
class Edit:
    """One configuration file and the keys to set in it (a top-level key -> value; a
    mapping value is merged one level down, so other servers and providers stay)."""

    path: Path
    keys: Mapping[str, Any]


def refusal(h: Harness) -> str | None:
    """Why ``--save`` cannot write ``h``'s configuration (None: it can)."""
    if h.name in ("claude", "opencode"):
        return None
    if h.name == "aider":
        return (
            "aider's configuration is YAML (.aider.conf.yml, .aider.model.settings.yml), "
            "which Sakur4 does not rewrite: docs/harnesses.md lists the lines to add"
        )
    return f"{h.describe} has no configuration file Sakur4 knows: set its variables yourself"


def edits(h: Harness, run: Launch, environ: Mapping[str, str]) -> list[Edit]:
    """The files ``run`` (a launch without a project header) is saved into."""
    home = Path(environ.get("HOME") or Path.home())
    if h.name == "claude":
        config = environ.get("CLAUDE_CONFIG_DIR")
        settings = Path(config) / "settings.json" if config else home / ".claude/settings.json"
        state = Path(config) / ".claude.json" if config else home / ".claude.json"
        env = {k: v for k, v in run.env.items() if k not in RUN_ONLY}
        out = [Edit(settings, {"env": env})]
        if "mcp.json" in run.files:
            servers = json.loads(run.files["mcp.json"])["mcpServers"]
            out.append(Edit(state, {"mcpServers": servers}))
        return out
    if h.name == "opencode":
        xdg = environ.get("XDG_CONFIG_HOME")
        where = (Path(xdg) if xdg else home / ".config") / "opencode" / "opencode.json"
        content = json.loads(run.env["OPENCODE_CONFIG_CONTENT"])
        content.pop("$schema", None)
        return [Edit(where, content)]
    raise SettingsError(refusal(h) or h.name)


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
