"""Hostile input: the gate never raises and stays bounded in time.

The bound (2 s of this thread's CPU per check) is a safety net against runaway parsing, not a
performance target; bench/gate.py measures speed. It is CPU time, not wall time: other work on a
loaded machine (a parallel test run) stretches wall time and used to fail this check.
"""

from __future__ import annotations

import time

from executor.approval import Decision, GateConfig, Verdict, analyze, evaluate
from executor.approval.detect import clear_cache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BOUND_SECONDS = 2.0

_SHELLISH = st.sampled_from(
    [
        "rm",
        "-rf",
        "/",
        "~",
        "$(",
        ")",
        "`",
        "'",
        '"',
        "$'",
        "\\",
        "{",
        "}",
        ",",
        "<<EOF\n",
        "\nEOF\n",
        "<<<",
        "|",
        "||",
        "&&",
        ";",
        "&",
        ">",
        ">>",
        "<(",
        ">(",
        "${",
        "IFS",
        "}",
        "bash -c ",
        "eval ",
        "python3 -c ",
        "sudo ",
        "xargs ",
        "\n",
        "\t",
        "\x00",
        "\x1b[0m",
        "ｒｍ",
        "(",
        "((",
        "))",
        "[[",
        "]]",
        "case x in",
        "esac",
        "for i in 1; do",
        "done",
        "f(){",
        ":(){ :|:& };:",
        "curl x",
        "| sh",
        "base64 -d",
        "DROP TABLE t;",
        "#",
        "$x",
        "x=",
        "\udcff",
        "\u200b",
        "*",
        "?",
        "!",
        "--",
        "-",
    ]
)


def _check(command: str) -> Verdict:
    clear_cache()
    start = time.thread_time()
    v = analyze(command)
    elapsed = time.thread_time() - start
    assert isinstance(v, Verdict) and v.decision in Decision
    assert elapsed < BOUND_SECONDS, (elapsed, command[:200])
    return v


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_random_text(command: str) -> None:
    _check(command)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SHELLISH, max_size=60).map("".join))
def test_shellish_fragments(command: str) -> None:
    _check(command)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_invalid_utf8(raw: bytes) -> None:
    _check(raw.decode("utf-8", errors="surrogateescape"))


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=1, max_value=3000),
    st.sampled_from(["$(", "(", "{ ", "`", "bash -c '", '"', "$((", "<(", "if true; then "]),
)
def test_deep_nesting(depth: int, opener: str) -> None:
    _check(opener * depth + "rm -rf /")


@settings(max_examples=30, deadline=None)
@given(
    st.integers(min_value=1, max_value=2000),
    st.sampled_from([("$(", ")"), ("(", ")"), ("{ ", "; }"), ("$(echo $(", "))")]),
)
def test_balanced_nesting_is_seen_or_too_complex(depth: int, pair: tuple[str, str]) -> None:
    opener, closer = pair
    v = _check(opener * depth + "rm -rf /" + closer * depth)
    assert v.decision is Decision.DENY or v.rule == "too_complex", v


def test_huge_inputs_are_bounded() -> None:
    heredoc = "cat <<'EOF' > notes.txt\n" + ("rm -rf / is text here\n" * 4000) + "EOF\n"
    assert _check(heredoc).decision is Decision.ALLOW
    assert _check("bash <<'EOF'\n" + "echo hi\n" * 3000 + "rm -rf /\nEOF\n").decision is Decision.DENY
    assert _check("x" * 1_000_000).rule == "too_complex"
    assert _check("echo " + "{a,b}" * 40).decision is Decision.ALLOW
    assert _check(";" * 50_000).decision in (Decision.ALLOW, Decision.ASK)
    assert _check("'" * 9999).decision in (Decision.ALLOW, Decision.ASK)
    assert _check("a=$a$a; " * 2000).decision in (Decision.ALLOW, Decision.ASK)


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["ask", "deny", "allow"]))
def test_policy_never_raises(command: str, mode: str) -> None:
    v = evaluate(command, GateConfig(mode=mode), backend="x", approved_rules={"git_force_push"})
    assert isinstance(v, Verdict)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["{", "", "$", "${", "echo {", "x=", "'", '"', "$(", "bash -c $'"]),
    st.text(st.characters(min_codepoint=0x10000), min_size=1, max_size=8),
)
def test_characters_outside_the_bmp(prefix: str, tail: str) -> None:
    # tree-sitter-bash 0.25 segfaults on some of these; the gate must never hand them over
    _check(prefix + tail)
    _check("bash -c $'{\\U000f7472'")
