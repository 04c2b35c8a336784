"""The Redis records the processes share: keys, streams, applied offsets, snapshots,
commit records and queue, locks, dead letters, metrics. Capture, commits and the
RPC talk to each other only through these."""
