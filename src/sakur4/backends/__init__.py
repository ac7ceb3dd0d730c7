"""Inference-server adapters: HTTP clients per server kind, and the local llama-server."""
