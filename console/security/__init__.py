"""The console's own defences: the secret key, the request-body cap, request ids on errors."""
