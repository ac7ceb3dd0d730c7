"""The coding-agent harnesses ``sakur4 wrap`` runs: how each one is pointed at the gateway
and the MCP server for one run, and how the servers it needs are found."""
