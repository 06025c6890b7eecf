"""Claims: each of the paper's findings as a rule re-derived from a run's tables, with its verdict."""
