"""Deterministic testing kit for trio-mcp servers (in progress)."""
