"""The daemon's configuration: YAML, validated at start.

An unknown key, a wrong type or a missing required value stops the daemon with a
message naming the key and what is expected (``ConfigError``).

Example::

    backend: local                 # the default backend's name
    backends:
      local: {kind: local}
      sandbox:
        kind: docker
        image: executor-sandbox:latest
        network: none
    limits:
      default_timeout_seconds: 180
      max_timeout_seconds: 3600
    approval:
      mode: ask
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from executor.approval import GateConfig
from executor.backends import KINDS, backend_class
from executor.backends.base import Options


class ConfigError(Exception):
    """The configuration is invalid; the message says which key and what is expected."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Model):
    default_timeout_seconds: float = Field(default=180.0, gt=0)
    max_timeout_seconds: float = Field(default=3600.0, gt=0)
    kill_grace_seconds: float = Field(default=2.0, ge=0, le=60)
    max_command_bytes: int = Field(default=1 << 20, gt=0)
    max_stdin_bytes: int = Field(default=16 << 20, ge=0)
    max_env_vars: int = Field(default=256, ge=0)
    max_env_bytes: int = Field(default=256 << 10, ge=0)
    run_output_bytes: int = Field(default=64 << 10, gt=0)  # Run: head + tail kept of each stream
    max_tasks: int = Field(default=1024, gt=0)
    max_concurrent_execs: int = Field(default=256, gt=0)
    max_queued_per_task: int = Field(default=16, gt=0)  # requests waiting for a task's turn (Task.turn)
    task_idle_seconds: float = Field(default=0.0, ge=0)  # 0 = never reap idle tasks
    max_message_bytes: int = Field(default=32 << 20, gt=1024)
    drain_seconds: float = Field(default=10.0, ge=0)  # SIGTERM: grace for running commands


class ProcessLimits(_Model):
    max_per_task: int = Field(default=32, gt=0)
    max_total: int = Field(default=512, gt=0)
    memory_buffer_bytes: int = Field(default=1 << 20, gt=0)  # kept in memory per process
    spill_file_bytes: int = Field(default=64 << 20, gt=0)  # a spill file rotates past this
    spill_files: int = Field(default=2, ge=1)  # rotated files kept
    retain_seconds: float = Field(default=1800.0, ge=0)  # finished processes stay readable
    #: All processes' spill files together, on the state directory's disk; 0 = a quarter of its free
    #: space at start, between 64 MiB and 16 GiB. Past it, finished processes' files go first.
    max_spill_bytes: int = Field(default=0, ge=0)


class TokenConfig(_Model):
    name: str
    token: str | None = None
    token_file: str | None = None
    roles: list[Literal["exec", "approve", "admin"]] = ["exec"]

    @model_validator(mode="after")
    def _one_source(self) -> "TokenConfig":
        if bool(self.token) == bool(self.token_file):
            raise ValueError("give exactly one of `token` or `token_file`")
        if self.token:
            _check_token_length(self.token, "token")
        return self

    def secret(self) -> str:
        if self.token:
            return self.token
        assert self.token_file is not None  # _one_source: without a token, a token_file
        try:
            value = Path(self.token_file).expanduser().read_text().strip()
        except OSError as exc:
            raise ConfigError(f"auth.tokens[{self.name}].token_file: cannot read {self.token_file}: {exc.strerror}") from exc
        if not value:
            raise ConfigError(f"auth.tokens[{self.name}].token_file: {self.token_file} is empty")
        try:
            _check_token_length(value, f"the token in {self.token_file}")
        except ValueError as exc:
            raise ConfigError(f"auth.tokens[{self.name}].token_file: {exc}") from None
        return value


#: The shortest token accepted: every token is masked in command output (executor.redact), which
#: only masks values long enough not to hit ordinary output, and a short token is guessable.
MIN_TOKEN_CHARS = 16


def _check_token_length(token: str, what: str) -> None:
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"{what} is {len(token)} characters; a token must be at least {MIN_TOKEN_CHARS} "
                         f"(shorter ones are guessable and would not be redacted from command output): "
                         f"generate one, e.g. `openssl rand -hex 32`")


class AuthConfig(_Model):
    tokens: list[TokenConfig] = []


class TLSConfig(_Model):
    cert: str
    key: str
    client_ca: str | None = None


class MetricsConfig(_Model):
    listen: str | None = None  # e.g. 127.0.0.1:9464


class LoggingConfig(_Model):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"


class RedactionConfig(_Model):
    """Values masked in every command's output, besides auth tokens and backend credentials."""

    #: Names of the daemon's environment variables whose values are masked (cloud keys the daemon
    #: itself holds, say). A name that is not set is ignored.
    env: list[str] = []


class FleetConfig(_Model):
    """Many daemons behind one proxy: this daemon's name and every member's (executor.placement).

    A daemon refuses a task that another member owns (FAILED_PRECONDITION naming the owner), so a
    misrouted call fails instead of starting a second shell for the task here."""

    #: This daemon's name, as listed in members; empty = the host name (a StatefulSet pod's name,
    #: so one config serves every pod).
    member: str = ""
    members: list[str] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _default_member(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("member"):
            import socket

            data = {**data, "member": socket.gethostname().split(".")[0]}
        return data

    @model_validator(mode="after")
    def _member_listed(self) -> "FleetConfig":
        if len(set(self.members)) != len(self.members):
            raise ValueError("members are listed twice")
        for name in self.members:
            if not name or not all(c.isalnum() or c in "._-" for c in name):
                raise ValueError(f"member name {name!r}: use letters, digits, '.', '_' and '-'")
        if self.member not in self.members:
            raise ValueError(f"member {self.member!r} is not in members {self.members} (member defaults to the "
                             "host name)")
        return self


class StreamsConfig(_Model):
    """Keeping long quiet streams alive through proxies with idle timeouts."""

    #: A heartbeat event on Exec, Pty and StreamProcessOutput streams after this many seconds
    #: without output (0 = none). Set it below the proxy's read/idle timeout.
    heartbeat_seconds: float = Field(default=0.0, ge=0)
    #: HTTP/2 keepalive PINGs from the daemon on every connection (0 = none).
    http2_ping_seconds: float = Field(default=0.0, ge=0)


class Config(_Model):
    backend: str = "local"
    backends: dict[str, dict[str, Any]] = {"local": {"kind": "local"}}
    listen: list[str] = []  # default: unix://<state_dir>/executor.sock
    state_dir: str | None = None
    limits: Limits = Limits()
    processes: ProcessLimits = ProcessLimits()
    approval: GateConfig = GateConfig()
    auth: AuthConfig = AuthConfig()
    tls: TLSConfig | None = None
    metrics: MetricsConfig = MetricsConfig()
    logging: LoggingConfig = LoggingConfig()
    redaction: RedactionConfig = RedactionConfig()
    fleet: FleetConfig | None = None
    streams: StreamsConfig = StreamsConfig()

    @field_validator("listen", mode="before")
    @classmethod
    def _listen_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def backend_options(self) -> dict[str, tuple[str, Options]]:
        """name -> (kind, validated options); raises ConfigError naming the key."""
        out: dict[str, tuple[str, Options]] = {}
        for name, raw in self.backends.items():
            raw = dict(raw or {})
            kind = raw.pop("kind", name)
            if kind not in KINDS:
                raise ConfigError(f"backends.{name}.kind: unknown backend kind {kind!r}; expected one of {', '.join(KINDS)}")
            try:
                cls = backend_class(kind)
            except ImportError as exc:
                raise ConfigError(f"backends.{name}: the {kind} backend needs an optional package: {exc}. "
                                  f"Install it with `pip install 'executor-daemon[{kind.replace('_', '-')}]'`") from exc
            try:
                out[name] = (kind, cls.Options.model_validate(raw))
            except ValidationError as exc:
                raise ConfigError(_explain(exc, f"backends.{name}")) from None
        return out


def secret_paths(config: Config, config_path: str | os.PathLike[str] | None, listen: list[str]) -> list[str]:
    """Files no command may see (handed to every backend's ``hide()``): the config file, every
    ``token_file``, the TLS key, the unix sockets listened on and the paths backend options name
    as secrets (options whose name ends in ``key_file``, ``token_file`` or ``secret_file``)."""
    paths = [str(config_path)] if config_path else []
    paths += [t.token_file for t in config.auth.tokens if t.token_file]
    if config.tls is not None:
        paths.append(config.tls.key)
    paths += [a[len("unix://"):] if a.startswith("unix://") else a[len("unix:"):] for a in listen if a.startswith("unix:")]
    for raw in config.backends.values():
        for key, value in (raw or {}).items():
            if key.endswith(("key_file", "token_file", "secret_file")) and isinstance(value, str):
                paths.append(value)
    return [str(Path(p).expanduser()) for p in paths]


def _explain(exc: ValidationError, prefix: str = "") -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"{key}: unknown key")
        elif err["type"] == "missing":
            lines.append(f"{key}: required value missing")
        elif isinstance(err.get("input"), dict | list) or key.endswith(("token", "secret", "password", "key")):
            # A whole mapping (a model's own check) may hold a token: never echoed, nor a secret's value.
            lines.append(f"{key}: {err['msg']}")
        else:
            lines.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
    return "invalid configuration: " + "; ".join(lines)


def load_config(path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Read and validate the config file (or an empty config), then check cross-references."""
    data: dict[str, Any] = {}
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(loaded).__name__}")
        data = loaded
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc)) from None
    if config.backend not in config.backends:
        raise ConfigError(f"backend: {config.backend!r} is not configured under `backends:` "
                          f"(configured: {', '.join(config.backends) or 'none'})")
    if config.limits.default_timeout_seconds > config.limits.max_timeout_seconds:
        raise ConfigError("limits.default_timeout_seconds must not exceed limits.max_timeout_seconds")
    config.backend_options()  # validates every backend's options now
    return config


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "executor"
