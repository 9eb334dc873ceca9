"""Shared fixtures. Tests use the real database and broker named by the settings (PostgreSQL and
Redis in CI, SQLite and the filesystem broker in the embedded run); nothing is mocked."""
