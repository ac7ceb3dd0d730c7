"""Fixtures that start a real llama-server (filled in by the backends work)."""
