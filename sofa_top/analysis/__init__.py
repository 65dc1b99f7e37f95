"""Analysis: pure functions that classify stacks, aggregate them and judge verdicts."""
