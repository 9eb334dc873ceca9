"""KServe v2 REST on a lean raw ASGI app (served by uvicorn with httptools and uvloop)."""
