"""The OpenViking 0.5.2 HTTP client and its typed results (the one OV adapter)."""
