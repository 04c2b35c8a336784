"""Auto-recall: choosing and ranking memory hits, the injected block and the query/marker text rules."""
