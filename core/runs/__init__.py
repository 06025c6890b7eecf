"""Runs: the cache format and its one reader, the precompute stages that fill it, the summaries pages read,
live ablations."""
