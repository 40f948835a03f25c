"""Infra for the local backend: nothing to start."""


def provision() -> dict:
    return {"kind": "local"}
