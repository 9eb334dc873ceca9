"""The console's pages: server-rendered templates over the registry's services and selectors.

Presentation only. Every page and action checks the user's role on the server (``access``); every
change goes through a ``repository.services`` function, which enforces the rules.
"""
