"""Symbolic Ledger tools: ledger_index, ledger_symbol, repo_map, impact (SPEC §4)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from sakur4.bounds import IMPACT_DEPTH, MAP_BUDGET
from sakur4.mcp.host import ToolHost
from sakur4.mcp.tools.common import MAX_NAME, MAX_PATH, ProjectArg, ProjectInfo
from sakur4.mcp.toolserver import ToolServer
from sakur4.vocabulary import Fact

# Each tool imports the Ledger when it is called: tree-sitter, pathspec and the worker
# pool are not what a server answering `initialize` should wait for (issue 18). The
# fact record it publishes is the foundation's, so its schema costs no Ledger import.

NameArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_NAME,
        description="qualified name (pkg.mod.Class.method), a dotted tail of one, or a bare name",
    ),
]


class IndexResult(BaseModel):
    project: ProjectInfo
    scope: str = Field(description="the path indexed, relative to the root ('' for all of it)")
    files_seen: int
    files_parsed: int
    files_unchanged: int = Field(description="skipped because their content did not change")
    files_removed: int = Field(description="gone since the last run: their symbols tombstoned")
    facts_written: int = Field(description="new or changed symbols")
    tombstones_written: int
    references_written: int
    files_with_syntax_errors: int
    skipped: dict[str, int] = Field(description="files not parsed, by reason")
    languages: dict[str, int] = Field(description="files parsed per language")
    seconds: float


class SymbolOut(BaseModel):
    current: Fact
    history: list[Fact] | None = Field(
        None, description="every fact for this symbol, oldest first (with history=true)"
    )


class SymbolResult(BaseModel):
    project: ProjectInfo
    symbols: list[SymbolOut]
    hint: str | None = None


class MapEntryOut(BaseModel):
    path: str
    qualified_name: str
    kind: str
    start_line: int | None
    signature: str
    rank: float


class RepoMapResult(BaseModel):
    project: ProjectInfo
    text: str = Field(description="the map, ready to put in a prompt")
    tokens: int
    budget_tokens: int
    files_shown: int
    symbols_shown: int
    symbols_total: int
    focus_unmatched: list[str] = Field(description="focus names that matched nothing")
    entries: list[MapEntryOut]


class ImpactEntryOut(BaseModel):
    depth: int = Field(description="0: the symbol asked about")
    path: str
    qualified_name: str
    kind: str
    via: str = Field(description="the name it references")
    ref_kind: str
    line: int | None
    resolved: bool = Field(description="the name can only mean the symbol followed")
    stale: bool = Field(description="its Atlas summary no longer matches the code")
    stale_reason: str | None


class ImpactResult(BaseModel):
    project: ProjectInfo
    name: str
    depth: int
    truncated: bool = Field(description="more entries existed than the limit")
    entries: list[ImpactEntryOut]


def register(server: ToolServer, host: ToolHost) -> None:
    def ledger_index(
        path: Annotated[
            str | None,
            Field(
                max_length=MAX_PATH,
                description="file or directory inside the project (default: all of it)",
            ),
        ] = None,
        project: ProjectArg = None,
    ) -> IndexResult:
        """Parse the project's source files (Python, JavaScript, TypeScript, Go, Rust) into
        the Symbolic Ledger. Incremental: only files whose content changed are parsed;
        deleted symbols are tombstoned. Paths outside the project are refused."""
        from sakur4.ledger import index_project
        from sakur4.ledger.walk import WalkLimits

        proj = host.project(project)
        report = index_project(host.store, proj, path, limits=WalkLimits.of(host.settings))
        d = report.as_dict()
        for key in ("project_id", "root"):
            d.pop(key)
        return IndexResult(project=ProjectInfo.of(proj), **d)

    def ledger_symbol(
        name: NameArg,
        history: Annotated[bool, Field(description="include every past fact")] = False,
        project: ProjectArg = None,
    ) -> SymbolResult:
        """Look a symbol up in the Symbolic Ledger (parsed from the code, never written by a
        model): its current signature, kind, file and line span, and hash; with history,
        every earlier version too."""
        from sakur4.ledger import fact_history, find_symbols, indexed_file_count

        proj = host.project(project)
        found = find_symbols(host.store, proj.id, name)
        symbols = [
            SymbolOut(
                current=f,
                history=fact_history(host.store, proj.id, f.path, f.qualified_name)
                if history
                else None,
            )
            for f in found
        ]
        hint = None
        if not symbols:
            hint = (
                f"no current symbol named {name!r}"
                if indexed_file_count(host.store, proj.id)
                else "nothing is indexed yet: call ledger_index first"
            )
        return SymbolResult(project=ProjectInfo.of(proj), symbols=symbols, hint=hint)

    def repo_map_tool(
        budget_tokens: Annotated[
            int,
            Field(
                ge=MAP_BUDGET.lo, le=MAP_BUDGET.hi, description="the map's size limit, in tokens"
            ),
        ] = 1024,
        focus: Annotated[
            list[Annotated[str, Field(max_length=MAX_PATH)]] | None,
            Field(max_length=100, description="files or symbols to rank first"),
        ] = None,
        project: ProjectArg = None,
    ) -> RepoMapResult:
        """A map of the repository for a prompt: files and their most important symbols,
        ranked over the reference graph (PageRank-style, personalised by `focus`), cut to
        a token budget."""
        from sakur4.ledger import repo_map

        proj = host.project(project)
        m = repo_map(host.store, proj.id, budget_tokens, focus or ())
        return RepoMapResult(
            project=ProjectInfo.of(proj),
            text=m.text,
            tokens=m.tokens,
            budget_tokens=m.budget_tokens,
            files_shown=m.files_shown,
            symbols_shown=m.symbols_shown,
            symbols_total=m.symbols_total,
            focus_unmatched=list(m.focus_unmatched),
            entries=[MapEntryOut(**e.__dict__) for e in m.entries],
        )

    def impact_tool(
        name: NameArg,
        depth: Annotated[
            int, Field(ge=IMPACT_DEPTH.lo, le=IMPACT_DEPTH.hi, description="levels of referrers")
        ] = 3,
        limit: Annotated[int, Field(ge=1, le=5000, description="most entries")] = 500,
        project: ProjectArg = None,
    ) -> ImpactResult:
        """What would a change to this symbol affect: everything that references it,
        transitively to `depth`, each entry marked stale when its Atlas summary no longer
        matches the code."""
        from sakur4.ledger import impact

        proj = host.project(project)
        found = impact(host.store, proj.id, name, depth, limit)
        return ImpactResult(
            project=ProjectInfo.of(proj),
            name=found.name,
            depth=found.depth,
            truncated=found.truncated,
            entries=[ImpactEntryOut(**e.as_dict()) for e in found.entries],
        )

    server.add(ledger_index, title="Index the code into the Ledger", writes=True)
    server.add(ledger_symbol, title="Look up a symbol", writes=False)
    server.add(repo_map_tool, name="repo_map", title="Repository map", writes=False)
    server.add(impact_tool, name="impact", title="Impact of changing a symbol", writes=False)
