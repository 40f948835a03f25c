"""Infra for the local backend with `isolation: none` (the conformance suite runs local both ways)."""

#: The backend kind this variant configures (the conformance daemon names its backend after it).
KIND = "local"


def provision() -> dict:
    return {"kind": "local", "isolation": "none"}
