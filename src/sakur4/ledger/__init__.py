"""The Symbolic Ledger service: deterministic, parser-written, append-only memory.

Only the parser writes it (SPEC §4): :func:`index_project` turns files into
facts; everything else here reads. The MCP server, the Atlas and the CLI call:

- :func:`index_project` — incremental index of a project or a path inside it
- :func:`current_fact`, :func:`fact_history`, :func:`find_symbols` — facts (each a
  :class:`sakur4.vocabulary.Fact`, the one fact record)
- :func:`repo_map` — ranked files and symbols within a token budget
- :func:`impact` — what references a symbol, transitively, with Atlas staleness
"""

from sakur4.ledger.facts import (
    current_fact,
    fact_history,
    find_symbols,
    indexed_file_count,
)
from sakur4.ledger.impact import Impact, ImpactEntry, impact, staleness
from sakur4.ledger.index import IndexReport, ProgressFn, index_project
from sakur4.ledger.repomap import MapEntry, RepoMap, TokenCounter, repo_map
from sakur4.ledger.walk import MAX_FILE_BYTES, VENDORED_DIRS

__all__ = [
    "MAX_FILE_BYTES",
    "VENDORED_DIRS",
    "Impact",
    "ImpactEntry",
    "IndexReport",
    "MapEntry",
    "ProgressFn",
    "RepoMap",
    "TokenCounter",
    "current_fact",
    "fact_history",
    "find_symbols",
    "impact",
    "index_project",
    "indexed_file_count",
    "repo_map",
    "staleness",
]
