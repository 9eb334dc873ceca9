"""API classes, one per operation, grouped by what they concern."""
