"""Portico's management REST API (Django REST framework), mounted under ``/api/``.

Presentation only: every API class validates its input with its own serializer, calls one
``repository`` service (writes) or selector (reads) and renders its own output serializer.
"""
