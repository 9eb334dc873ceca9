"""The registry: models, versions, artifacts, configs, golden requests, promotions, audit."""
