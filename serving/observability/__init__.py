"""Observability of the serving process: model metrics, system metrics, live stats."""
