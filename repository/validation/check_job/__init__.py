"""Each check as its own Kubernetes Job: no secrets, no service-account token, no network.

``manifest`` builds the Job (pure, rendered by the tests); ``launcher`` creates it, streams the
bundle into the pod's stdin over the attach API and reads the framed report back.
"""
