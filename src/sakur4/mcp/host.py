"""What every tool shares: the settings, the open store, and which project a call is about.

A tool never touches another project's rows: each call resolves exactly one project
(the caller's explicit ``project`` root, or the server's configured root) and passes
its id to the service it calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sakur4.embedders import Embedder, make_embedder
from sakur4.errors import InputError, NotFound
from sakur4.settings import Settings
from sakur4.store import Store
from sakur4.store.projects import Project, ensure_project, find_project, register_project
from sakur4.store.roles import not_granted


@dataclass(frozen=True)
class ToolHost:
    """The server-wide state behind the tools.

    ``register_new_projects`` decides whether a call naming an unregistered root may
    register it: yes on stdio (the harness that spawned us is the user), no over
    HTTP, where a remote caller must not make the server read any directory it names.
    """

    settings: Settings
    store: Store
    register_new_projects: bool = True
    embedder: Embedder | None = None

    @classmethod
    def create(cls, settings: Settings, store: Store, *, register_new_projects: bool) -> ToolHost:
        """The host for a server: the configured embedder is built once, here."""
        return cls(settings, store, register_new_projects, make_embedder(settings))

    def project(self, root: str | None) -> Project:
        """The project a call works on: ``root`` if given, else the configured one."""
        if root is None:
            return ensure_project(self.store, self.settings.project_root())
        path = Path(root)
        if not path.is_absolute():
            raise InputError(f"project must be an absolute path to the project root, got {root!r}")
        found = find_project(self.store, path)
        if found is not None:
            return found
        if not self.register_new_projects:
            raise not_granted(self.store, path) or NotFound(
                f"project {path} is not registered with this server; "
                f"register it first with `sakur4 project add {path}`"
            )
        return register_project(self.store, path)
