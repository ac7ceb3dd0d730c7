"""Slot files: a parked session's KV state, written by the server in its slot directory
(llama-server's ``--slot-save-path``) under a name the gateway gives it.

A KV state is a plaintext transcript of the conversation: where the directory is on
this machine the gateway makes each file owner-only as soon as it is written (the
server writes 0644) and keeps the directory under a cap (least recently used out). A
file's name carries the server's fingerprint (:func:`fingerprint`): a server started
another way never restores an old state.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sakur4.probe import ProbeResult

PREFIX = "sakur4-state-"
SUFFIX = ".bin"


def fingerprint(probe: ProbeResult) -> str:
    """What a saved state is valid for: the server's build, model, window, slots and
    template (its /props), and how the probe found it resumes (flags such as
    ``--swa-full`` that /props does not show change that)."""
    seen = [
        probe.kind,
        probe.fingerprint,
        probe.model,
        probe.n_ctx,
        probe.checkpoint_source,
        sorted(probe.sources),
        probe.recurrent_memory,
    ]
    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()[:12]


def session_key(project_id: int, session: str) -> str:
    """A session's part of its file names (no session name reaches the server's disk)."""
    return hashlib.sha256(f"{project_id}\0{session}".encode()).hexdigest()[:20]


def file_name(server: str, key: str) -> str:
    return f"{PREFIX}{server}-{key}{SUFFIX}"


@dataclass(frozen=True)
class Trimmed:
    """What keeping the directory under its cap removed."""

    files: int
    bytes: int


class SlotDirectory:
    """The server's slot directory, where it is on this machine (``path`` None: it is
    not, and the server keeps its files as it writes them)."""

    def __init__(self, path: Path | None, cap_bytes: int) -> None:
        self.path = path
        self.cap_bytes = cap_bytes

    def _ours(self) -> list[Path]:
        if self.path is None:
            return []
        try:
            return [p for p in self.path.glob(f"{PREFIX}*{SUFFIX}") if p.is_file()]
        except OSError:
            return []

    def has(self, name: str) -> bool | None:
        """Whether the file is there (None: the directory is not on this machine)."""
        return None if self.path is None else (self.path / name).is_file()

    def saved(self, name: str) -> Trimmed:
        """A file was just written: owner-only, and the directory kept under its cap
        (the least recently used files out, never this one)."""
        if self.path is None:
            return Trimmed(0, 0)
        with contextlib.suppress(OSError):
            os.chmod(self.path / name, 0o600)
        return self._trim(keep=name)

    def used(self, name: str) -> None:
        """A file was restored: it is the most recently used."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                os.utime(self.path / name)

    def remove(self, name: str) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                (self.path / name).unlink()

    def made_by_others(self, server: str, key: str) -> list[str]:
        """The fingerprints of this session's files that another server made."""
        found = []
        for p in self._ours():
            fp, _, rest = p.name[len(PREFIX) : -len(SUFFIX)].partition("-")
            if rest == key and fp != server:
                found.append(fp)
        return found

    def _trim(self, keep: str) -> Trimmed:
        files = []
        for p in self._ours():
            with contextlib.suppress(OSError):
                st = p.stat()
                files.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in files)
        removed = Trimmed(0, 0)
        for _, size, p in sorted(files, key=lambda f: f[0]):
            if total <= self.cap_bytes:
                break
            if p.name == keep:
                continue
            with contextlib.suppress(OSError):
                p.unlink()
                total -= size
                removed = Trimmed(removed.files + 1, removed.bytes + size)
        return removed
