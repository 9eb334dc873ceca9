"""Measure before you promote: per-model SLOs, load tests of one version with its real inputs, and
a sweep over batching and instance counts that turns its best result into a new version.

``models`` holds the rows (re-exported from ``repository.models``); ``launcher`` starts the real
serving code on a private loopback port; ``loadgen`` drives it; ``measure`` turns one run into
numbers; ``sweep`` plans settings and picks the recommendation; ``services``/``selectors``/``tasks``
are the Django side; ``alerts`` writes Prometheus rules from the SLOs.
"""
