"""The MCP tools, one module per service they expose; each has ``register(server, host)``.

The tool names are a public contract (SPEC §2): ledger_index, ledger_symbol, repo_map,
impact, atlas_write, atlas_read, remember, recall, open_fold, anchor_pin, anchor_unpin,
anchor_list, status, receipts, probe.
"""

from sakur4.mcp.tools import anchors, atlas, episodes, ledger, reports

MODULES = (ledger, atlas, episodes, anchors, reports)
