"""The walls between the parts, checked on the source: a guarantee that lives in one place stays there.

- Every command reaches a backend through ``executor.launch``, whose functions take an ``Admitted``
  that only ``executor.admission`` can make: no other core module writes a request into a shell
  or spawns one in a sandbox.
- No import cycles inside the package (lazy imports included): the managers are built by the core
  and the gRPC mixins do not import the server.
- Backends and the gate know nothing of gRPC or the core; the client imports nothing of the server.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"executor": ROOT / "executor", "executor.backends": ROOT / "backends", "executor.approval": ROOT / "approval",
            "executor.integrations": ROOT / "executor" / "integrations"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, directory in PACKAGES.items():
        # Subpackages too (backends' ssh, daytona, _shared; approval's tools); executor's integrations
        # are their own entry.
        subpackages = package in ("executor.backends", "executor.approval")
        for path in sorted(directory.rglob("*.py") if subpackages else directory.glob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package, *parts))] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every executor module this module imports, at any depth of its code."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        if isinstance(node, ast.ImportFrom) and _type_checking_only(tree, node):
            continue
        # A submodule naming its own package (``from . import x``) is no cycle: the package is
        # initialised before any of its modules.
        out |= {t for t in targets if t in MODULES and t != name and not name.startswith(t + ".")}
    return out


def _type_checking_only(tree: ast.Module, target: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            if any(target is n for stmt in node.body for n in ast.walk(stmt)):
                return True
    return False


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_no_import_cycles():
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def _reach(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(("executor.backends", "executor.approval"))))
def test_backends_and_the_gate_import_neither_grpc_nor_the_core(module):
    text = MODULES[module].read_text()
    tree = ast.parse(text)
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
    assert not {n for n in names if n.split(".")[0] == "grpc"}, f"{module} imports grpc"
    core = {m for m in _reach(module) if not m.startswith(("executor.backends", "executor.approval"))}
    assert not core, f"{module} reaches the core: {sorted(core)}"


def test_the_client_imports_nothing_of_the_server():
    clients = ["executor.client", "executor.tool", *(m for m in MODULES if m.startswith("executor.integrations."))]
    assert "executor.integrations.swerex" in clients
    for client in clients:
        reached = _reach(client)
        server_side = reached & {"executor.server", "executor.service", "executor.admission", "executor.launch",
                                 "executor.processes", "executor.pty", "executor.shell", "executor.approvals"}
        assert not server_side, f"{client} imports {sorted(server_side)}"


# -- one way into a backend -------------------------------------------------------------------------

#: Where a process may be started in a sandbox, and why.
SPAWNERS = {
    "executor.launch": "starts what admission let through",
    "executor.shell": "starts the task's own bash (no request's command), and kills",
}


def _calls(path: Path, attr: str) -> list[int]:
    """Lines calling ``<something>.attr(...)``, except ``launch.attr`` (the way in)."""
    tree = ast.parse(path.read_text())
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attr
            and not (isinstance(n.func.value, ast.Name) and n.func.value.id == "launch")]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith(("executor.backends", "executor.approval"))))
def test_only_launch_starts_commands_in_a_backend(module):
    path = MODULES[module]
    if module not in SPAWNERS:
        assert not _calls(path, "spawn"), f"{module} spawns in a sandbox; go through executor.launch"
    if module != "executor.launch":
        runs = [line for line in _calls(path, "run") if "shell" in path.read_text().splitlines()[line - 1]]
        assert not runs or module == "executor.shell", f"{module}:{runs} writes a command into a shell directly"


async def test_launch_refuses_what_admission_did_not_make():
    from executor import launch
    from executor.admission import Admitted, Request
    from executor.approvals import Authorization
    from executor.approval import Decision, Verdict
    from executor.events import Entry

    req = Request(Entry.EXEC, "t", "rm -rf /", "local", {}, "")
    allowed = Authorization(True, Verdict(Decision.ALLOW))
    with pytest.raises(TypeError):
        Admitted(object(), req, allowed)
    with pytest.raises(TypeError):
        await launch.spawn(req, None, None, lock_held=True)  # a Request is not an admission
    with pytest.raises(TypeError):
        launch.run_in_shell(req, None, None, 0.0)
