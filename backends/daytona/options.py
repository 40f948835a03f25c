"""The daytona backend's options, and the names it gives the SDK's states."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, model_validator

from ..base import Options

STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"
_PREFIXES = {STDOUT_PREFIX: "stdout", STDERR_PREFIX: "stderr"}
_DEFAULT_API_URL = "https://app.daytona.io/api"
_GONE_STATES = {"destroyed", "destroying", "error", "build_failed"}
_STOPPED_STATES = {"stopped", "stopping", "archived", "archiving", "paused", "pausing"}
_QUOTA_WORDS = ("quota", "limit exceeded", "exceeded", "insufficient", "too many")


class DaytonaOptions(Options):
    """``backends.<name>`` for ``kind: daytona``."""

    #: The Daytona API; default ``$DAYTONA_API_URL`` or Daytona's cloud.
    api_url: str | None = None
    #: The API key itself (prefer ``api_key_env``); never logged or shown.
    api_key: SecretStr | None = None
    #: The daemon's environment variable holding the API key.
    api_key_env: str = "DAYTONA_API_KEY"
    #: Region; default the organization's.
    target: str | None = None
    #: A snapshot to start from, or an image to build from (mutually exclusive).
    snapshot: str | None = None
    image: str | None = None
    #: Resources (cores, GiB, GiB): Daytona honours these only when building from ``image``.
    cpu: int | None = None
    memory: int | None = None
    disk: int | None = None
    #: Minutes of inactivity after which Daytona stops the sandbox (0: never).
    auto_stop_interval: int = 15
    #: Minutes after stopping until Daytona deletes it (None: Daytona's default, never).
    auto_delete_interval: int | None = None
    #: Network policy: block all egress, or allow only these CIDRs.
    network_block_all: bool = False
    network_allow_list: list[str] = []
    #: One sandbox per task, or one for the whole daemon (tasks in subdirectories).
    sandbox_per: Literal["task", "daemon"] = "task"
    #: What CloseTask (per task) or shutdown (per daemon) does with the sandbox.
    on_close: Literal["delete", "stop", "keep"] = "delete"
    #: Extra labels on every sandbox this backend creates.
    labels: dict[str, str] = {}
    #: Seconds to wait for a sandbox to be created and started.
    create_timeout: float = 180.0
    #: Seconds for one API request.
    request_timeout: float = 30.0

    @model_validator(mode="after")
    def _check(self) -> "DaytonaOptions":
        if self.snapshot and self.image:
            raise ValueError("set either snapshot or image, not both")
        if (self.cpu or self.memory or self.disk) and not self.image:
            raise ValueError("cpu/memory/disk apply only when the sandbox is built from `image`; "
                             "a snapshot carries its own resources")
        if self.network_block_all and self.network_allow_list:
            raise ValueError("network_block_all and network_allow_list are mutually exclusive")
        return self
