"""Schedulers: how a model version's requests reach its instances (default, dynamic batching,
sequence batching, ensembles); ``factory.create_scheduler`` picks one from the config."""
