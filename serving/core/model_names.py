"""Model names a client may send: a name is never a path.

Folder mode turns a model name into a folder (``<repository>/<name>``, and the folder of a load's
``file:`` overrides), so a name holding a path separator, NUL, ``.`` or ``..`` (also once or twice
percent-encoded, as a URL path may carry it) could reach outside the repository. Such names are
refused on every route and RPC before anything looks them up.
"""

from __future__ import annotations

from urllib.parse import unquote

from serving.errors import InvalidArgumentError

_FORBIDDEN_CHARACTERS = ("/", "\\", "\x00")
_FORBIDDEN_NAMES = (".", "..")
_DECODINGS = 3  # a name is checked as sent and after each of up to two more percent-decodings


def model_name_problem(name: str) -> str:
    """Why ``name`` cannot be a model name, or '' when it can."""
    decoded = name
    for _ in range(_DECODINGS):
        if decoded in _FORBIDDEN_NAMES or any(c in decoded for c in _FORBIDDEN_CHARACTERS):
            return (
                f"invalid model name {name!r}: a model name cannot contain '/', '\\\\' or NUL, "
                "nor be '.' or '..' (percent-encoded or not)"
            )
        if "%" not in decoded:
            break
        decoded = unquote(decoded)
    return ""


def check_model_name(name: str) -> None:
    """Raise INVALID_ARG (HTTP 400, gRPC INVALID_ARGUMENT) for a name that is a path."""
    problem = model_name_problem(name)
    if problem:
        raise InvalidArgumentError(problem)
