"""Config validation: an unknown key, a wrong type or a missing value names the key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from executor.config import ConfigError, load_config


def write(tmp_path, text: str):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_empty_config_is_local(tmp_path):
    c = load_config(write(tmp_path, ""))
    assert c.backend == "local" and "local" in c.backends
    assert c.limits.default_timeout_seconds == 180 and c.limits.max_timeout_seconds == 3600
    assert c.limits.run_output_bytes == 64 * 1024 and c.limits.max_command_bytes == 1 << 20


@pytest.mark.parametrize("text, words", [
    ("bogus: 1\n", "bogus: unknown key"),
    ("limits:\n  default_timeout_seconds: soon\n", "limits.default_timeout_seconds"),
    ("limits:\n  max_tasks: -1\n", "limits.max_tasks"),
    ("backend: docker\n", "backend: 'docker' is not configured"),
    ("backends:\n  x:\n    kind: nosuch\nbackend: x\n", "backends.x.kind: unknown backend kind"),
    ("backends:\n  local:\n    kind: local\n    colour: red\n", "backends.local.colour: unknown key"),
    ("auth:\n  tokens:\n    - name: a\n      roles: [exec]\n", "exactly one of `token` or `token_file`"),
    ("auth:\n  tokens:\n    - token: x\n", "auth.tokens.0.name: required value missing"),
    ("approval:\n  mode: sometimes\n", "approval.mode"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("a: [\n", "not valid YAML"),
    ("limits:\n  default_timeout_seconds: 100\n  max_timeout_seconds: 10\n", "must not exceed"),
])
def test_bad_config_names_the_key(tmp_path, text, words):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert words in str(info.value)


def test_daemon_refuses_to_start_on_bad_config(tmp_path):
    cfg = write(tmp_path, "limits:\n  nonsense: 1\n")
    r = subprocess.run([sys.executable, "-m", "executor", "serve", "--config", str(cfg), "--state-dir",
                        str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "limits.nonsense: unknown key" in r.stderr


def test_non_loopback_tcp_needs_tls(tmp_path):
    cfg = write(tmp_path, "listen: 0.0.0.0:7777\n")
    r = subprocess.run([sys.executable, "-m", "executor", "serve", "--config", str(cfg), "--state-dir",
                        str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "needs TLS" in r.stderr


@pytest.mark.parametrize("address", ["127.0.0.1:7777", "[::1]:7777", "localhost:7777"])
def test_a_tcp_listener_needs_tokens_even_on_loopback(tmp_path, address):
    """Without tokens every caller holds every role: fine on the 0600 unix socket, never on TCP."""
    cfg = write(tmp_path, f"listen: '{address}'\n")
    r = subprocess.run([sys.executable, "-m", "executor", "serve", "--config", str(cfg), "--state-dir",
                        str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "needs auth.tokens" in r.stderr
    assert r.stderr.strip().count("\n") == 0, "one line that says what to do"


def test_readme_config_example_loads(tmp_path):
    """The README's config example is valid."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index("```yaml\n") + len("```yaml\n")
    example = readme[start:readme.index("```", start)]
    load_config(write(tmp_path, example))


@pytest.mark.parametrize("token", ["Hx7q-2k", "fifteen-chars!!"])
def test_a_short_token_is_refused(tmp_path, token):
    """Every token must be long enough to be redacted from command output (and not guessable)."""
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, f"auth:\n  tokens:\n    - name: human\n      token: {token!r}\n"
                                    "      roles: [approve]\n"))
    assert "auth.tokens.0" in str(info.value) and "at least 16" in str(info.value)
    assert token not in str(info.value)


def test_a_short_token_in_a_token_file_is_refused(tmp_path):
    (tmp_path / "t").write_text("Hx7q-2k\n")
    config = load_config(write(tmp_path, f"auth:\n  tokens:\n    - name: human\n      token_file: {tmp_path / 't'}\n"))
    with pytest.raises(ConfigError) as info:
        config.auth.tokens[0].secret()
    assert "auth.tokens[human].token_file" in str(info.value) and "at least 16" in str(info.value)
    assert "Hx7q-2k" not in str(info.value)


def test_a_sixteen_character_token_is_accepted_and_redacted(tmp_path):
    from executor.redact import Redactor

    config = load_config(write(tmp_path, "auth:\n  tokens:\n    - name: a\n      token: 'sixteen-chars-ok'\n"))
    secret = config.auth.tokens[0].secret()
    assert Redactor([secret]).scrub(f"x {secret} y".encode()) == b"x [REDACTED] y"
