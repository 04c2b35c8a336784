"""OpenClaw messages: the typed model, the seed's five-step pipeline, conversion to OV parts, token estimates."""
