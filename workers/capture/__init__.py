"""``ovstream capture``: shard consumers that apply turn events to OV sessions exactly once."""
