"""Aider's repo-map tags over a tree: the reference bench/index.py measures against.

    AIDER_PYTHON bench/aider_tags.py TREE CACHE_DIR < file-list

Run by bench/index.py with an interpreter that has aider installed (aider-chat
0.86.2 and the versions it pins: tree-sitter 0.25.2, tree-sitter-language-pack
0.13.0, grep-ast 0.9.0), never the project's own venv. For each file named on
stdin (the files Sakur4 indexes, relative to TREE) it calls
``RepoMap.get_tags``, what aider does for every file when it builds a map: read,
parse, run the tags query, and store the tags in its disk cache, which starts
empty (CACHE_DIR). Prints one JSON line: files, tags, definitions, seconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from aider.repomap import RepoMap  # type: ignore[import-not-found]


class QuietIO:
    """The little of aider's InputOutput that get_tags uses."""

    def read_text(self, fname: str) -> str | None:
        try:
            return Path(fname).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def tool_output(self, *args: object, **kwargs: object) -> None:
        pass

    tool_warning = tool_error = tool_output


def main() -> None:
    tree, cache = Path(sys.argv[1]), Path(sys.argv[2])
    rels = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    started = time.perf_counter()
    RepoMap.TAGS_CACHE_DIR = str(cache)  # absolute: kept out of the tree
    repo_map = RepoMap(root=str(tree), io=QuietIO())
    tags = defs = 0
    for rel in rels:
        for tag in repo_map.get_tags(str(tree / rel), rel):
            tags += 1
            defs += tag.kind == "def"
    seconds = time.perf_counter() - started
    print(json.dumps({"files": len(rels), "tags": tags, "definitions": defs, "seconds": seconds}))


if __name__ == "__main__":
    main()
