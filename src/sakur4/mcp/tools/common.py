"""Argument and result types every tool shares (pydantic: this is the edge)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from sakur4.store.projects import Project

# Bounds on what a caller may send: a clear validation error instead of a store
# (or a prompt) swollen by one oversized argument.
MAX_PATH = 4096
MAX_NAME = 1024
MAX_TEXT = 200_000
MAX_QUERY = 4096

ProjectArg = Annotated[
    str | None,
    Field(
        max_length=MAX_PATH,
        description="Absolute path of the project root. Default: the server's own project.",
    ),
]


class ProjectInfo(BaseModel):
    """Which project a result belongs to."""

    id: int
    name: str
    root: str

    @classmethod
    def of(cls, project: Project) -> ProjectInfo:
        return cls(id=project.id, name=project.name, root=str(project.root))
