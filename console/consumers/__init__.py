"""Channels consumers. Each one sends what it watches when a group message arrives and also polls
the row every second, because the embedded default's in-memory layer cannot carry messages from
the worker process; both paths go through the same ``push`` method."""
