"""Errors the core raises; the gRPC adapter maps ``code`` to a status code."""

from __future__ import annotations

import errno

from executor.backends.base import BackendError, ErrorKind


class CoreError(Exception):
    """A request that cannot be served, with a message that says what to fix.

    ``code`` is a gRPC status name (INVALID_ARGUMENT, NOT_FOUND, ...), kept as a string so
    the core does not import grpc."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> CoreError:
    return CoreError("INVALID_ARGUMENT", message)


def not_found(message: str) -> CoreError:
    return CoreError("NOT_FOUND", message)


def exhausted(message: str) -> CoreError:
    return CoreError("RESOURCE_EXHAUSTED", message)


def precondition(message: str) -> CoreError:
    return CoreError("FAILED_PRECONDITION", message)


def unsaved(what: str, exc: OSError, path: object) -> CoreError:
    """The daemon's own state could not be written (``what``: what was not done): RESOURCE_EXHAUSTED
    for a full disk or quota, FAILED_PRECONDITION for anything else (read-only, permissions); never
    UNAVAILABLE, which clients retry as a passing network fault."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    fix = "free space on the state disk" if full else "make the state directory writable"
    return CoreError("RESOURCE_EXHAUSTED" if full else "FAILED_PRECONDITION",
                     f"could not save {path} ({exc.strerror or exc}): {what}; {fix}")


_KIND_TO_CODE = {
    ErrorKind.UNAVAILABLE: "UNAVAILABLE",
    ErrorKind.FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ErrorKind.UNAUTHENTICATED: "UNAUTHENTICATED",
    ErrorKind.PERMISSION_DENIED: "PERMISSION_DENIED",
    ErrorKind.RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
    ErrorKind.NOT_FOUND: "NOT_FOUND",
    ErrorKind.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ErrorKind.LOST: "UNAVAILABLE",
    ErrorKind.INTERNAL: "INTERNAL",
}


def from_backend(backend: str, exc: BackendError) -> CoreError:
    """A backend failure before anything ran, as a status naming the backend."""
    return CoreError(_KIND_TO_CODE.get(exc.kind, "UNAVAILABLE"), f"backend {backend!r}: {exc.message}")
