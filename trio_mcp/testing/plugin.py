"""pytest plugin registered by trio-mcp (fixtures live here)."""
