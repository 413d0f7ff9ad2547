"""Layering: what the gateway process loads, and no import circles among our own modules.

- The gateway shares only ``core``'s top-level modules with the worker; the model side
  (``core.conversation``, ``core.processors``, ``core.cascade``) and the model runtimes stay out
  of its process.
- The product (core, gateway, worker, launcher) imports no benchmark, test or dev tool; bench and
  tests never import each other, except the tests of bench's own code.
- No import circle among the project's packages, type-only imports (``if TYPE_CHECKING:``) and
  imports inside functions included: each module's imports are read with ``ast``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "gateway", "worker", "launcher", "bench", "devtools", "tests")
MODEL_SIDE = ("core.conversation", "core.processors", "core.cascade",
              "torch", "onnxruntime", "ctranslate2", "transformers", "mcp")

# Runs in a fresh interpreter: records who imported each module first (the importing frame's
# module), so a failure names the chain from the gateway down to the forbidden module.
_PROBE = r"""
import builtins, json, sys
parent = {}
_real = builtins.__import__
def _tracking(name, globals=None, locals=None, fromlist=(), level=0):
    before = set(sys.modules)
    try:
        return _real(name, globals, locals, fromlist, level)
    finally:
        who = (globals or {}).get("__name__", "?")
        for mod in set(sys.modules) - before:
            parent.setdefault(mod, who)
builtins.__import__ = _tracking
import gateway.app
import gateway.__main__
builtins.__import__ = _real
forbidden = %r
bad = sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden))
chains = {}
for m in bad:
    chain, cur = [m], m
    while cur in parent and parent[cur] not in chain and len(chain) < 40:
        cur = parent[cur]
        chain.append(cur)
    chains[m] = " <- ".join(chain)
print(json.dumps(chains))
"""


def test_gateway_loads_no_model_side():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE % (MODEL_SIDE,)], cwd=ROOT, capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    chains = json.loads(out.stdout.strip().splitlines()[-1])
    # Report the top of each chain once (a package pulls in many submodules).
    roots = {m: c for m, c in chains.items() if not any(m.startswith(o + ".") for o in chains)}
    assert not roots, "the gateway imports the model side:\n  " + "\n  ".join(roots.values())


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "__pycache__" not in path.parts:
                mods[_module_name(path)] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Every project module ``name`` imports, wherever the import statement stands."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def add(target: str) -> None:
        # ``import a.b.c`` runs a, a.b and a.b.c; the importer depends on the deepest one that is ours
        while target and target not in mods:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                add(sub if sub in mods else module)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _edges_within(comp: list[str], graph: dict[str, set[str]]) -> str:
    members = set(comp)
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in comp)


def test_no_import_cycles():
    mods = _project_modules()
    graph = {name: _imports(name, path, mods) for name, path in mods.items()}
    cycles = _cycles(graph)
    assert not cycles, "import circles:\n  " + "\n  ".join(_edges_within(c, graph) for c in cycles)


# Who may import what inside core: its top-level modules are what the gateway and the worker share;
# the conversation core knows no backend (it defines the ``ConversationModel`` they implement); the
# cascade's parts are what backends are built of, never the other way round (issue 71).
FORBIDDEN = {
    "core": ("core.conversation", "core.processors", "core.cascade"),  # top-level core modules
    "core.conversation": ("core.processors", "core.cascade"),
    "core.cascade": ("core.processors",),
}


def test_core_layers():
    mods = _project_modules()
    bad = []
    for name, path in sorted(mods.items()):
        if name.startswith("core.conversation"):
            rule = FORBIDDEN["core.conversation"]
        elif name.startswith("core.cascade"):
            rule = FORBIDDEN["core.cascade"]
        elif name.startswith("core.") and name.count(".") == 1 and name not in FORBIDDEN["core"] or name == "core":
            rule = FORBIDDEN["core"]
        else:
            continue
        bad += [f"{name} -> {m}" for m in sorted(_imports(name, path, mods)) if m.startswith(rule)]
    assert not bad, "imports across core's layers:\n  " + "\n  ".join(bad)


PRODUCT = ("core", "gateway", "worker", "launcher")
# Tests of bench's own code import it, as the tests of the gateway import the gateway.
BENCH_TESTS = ("tests.unit.test_answer_set", "tests.unit.test_turn_set", "tests.unit.test_bench_quality",
               "tests.unit.test_eval_leaks", "tests.unit.test_duplex_set", "tests.e2e.test_bench",
               "tests.unit.test_duplex_heard", "tests.unit.test_duplex_webrtc", "tests.unit.test_bench_heard",
               "tests.unit.test_bench_omni",
               "tests.unit.test_duplex_room", "tests.e2e.test_room_e2e",
               # the café the VAD's room gate was chosen on is the bench's babble
               "tests.unit.test_vad_room_gate",
               # the room and the dev voices the turn's transcript over an echo was measured on
               "tests.unit.test_room",
               # the end-of-turn cases and checks it asserts are the ones the weights' fit keeps
               "tests.unit.test_semantic_vad")


def test_product_bench_and_tests_apart():
    mods = _project_modules()
    bad = []
    for name, path in sorted(mods.items()):
        top = name.split(".")[0]
        if top in PRODUCT:
            rule: tuple[str, ...] = ("bench", "tests", "devtools")
        elif top == "bench":
            rule = ("tests",)
        elif top == "tests" and name not in BENCH_TESTS:
            rule = ("bench",)
        else:
            continue
        bad += [f"{name} -> {m}" for m in sorted(_imports(name, path, mods)) if m.split(".")[0] in rule]
    assert not bad, "imports across product, bench and tests:\n  " + "\n  ".join(bad)


def test_cycle_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# Private names of other packages that have no public spelling; each says why it is used.
FOREIGN_PRIVATE = {
    "_get_talker_user_parts": "transformers' Qwen2.5-Omni: the Talker's prompt for a user turn (no public API)",
    "_get_talker_assistant_parts": "transformers' Qwen2.5-Omni: the Talker's prompt for a reply (no public API)",
    "_data": "aiortc's RtpPacket payload before depacketising (no public accessor)",
    "_replace": "a namedtuple's own method (public despite its underscore)",
}


def _private_names_defined(tree: ast.AST) -> set[str]:
    """Every ``_name`` a module defines: functions, classes, attributes it assigns, names it binds."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {n for n in names if n.startswith("_")}


def test_no_class_reaches_into_another_modules_private_state():
    """A part uses another part's public methods: no ``other._x`` (or ``self._x`` inherited from a
    base or mixin) where ``_x`` is defined in another module. A class may use its own privates and
    those of classes in its own module."""
    bad = []
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            own = _private_names_defined(tree)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                        and node.attr not in own and node.attr not in FOREIGN_PRIVATE):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "private state of another module:\n  " + "\n  ".join(bad)


PRODUCT_FILES = ("core", "gateway", "worker", "launcher", "static")
MOST_LINES = 600


def test_no_product_file_over_600_lines():
    """One job per module: a file past this has more than one (split it along its jobs)."""
    long = []
    for pkg in PRODUCT_FILES:
        for path in sorted((ROOT / pkg).rglob("*")):
            if path.suffix in (".py", ".js") and "__pycache__" not in path.parts and "vendor" not in path.parts:
                n = len(path.read_text().splitlines())
                if n > MOST_LINES:
                    long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, "files over 600 lines:\n  " + "\n  ".join(long)


# A reply's state (``reply.Response``) is owned by ``Replies``: other parts ask it to cut, keep, stop
# or add to a reply, and never write its fields themselves (issue 71).
RESPONSE_OWNERS = ("replies.py", "reply.py")
MUTATORS = {"set", "clear", "append", "extend", "pop", "update"}


def test_only_replies_writes_a_replys_state():
    import dataclasses

    from core.conversation.reply import Response

    files = sorted((ROOT / "core" / "conversation").glob("*.py"))
    trees = {p: ast.parse(p.read_text()) for p in files}
    # Field names other classes here use for their own state (``self.text = ...``) prove nothing.
    own = {n.attr for p, t in trees.items() if p.name != "reply.py" for n in ast.walk(t)
           if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
           and isinstance(n.value, ast.Name) and n.value.id == "self"}
    fields = {f.name for f in dataclasses.fields(Response)} - own
    assert {"cut_samples", "shadow", "gate", "cancel", "calls", "tool_round"} <= fields
    bad = []
    for p, tree in trees.items():
        if p.name in RESPONSE_OWNERS:
            continue
        for n in ast.walk(tree):
            target = None
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                target = n
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS
                  and isinstance(n.func.value, ast.Attribute)):
                target = n.func.value
            if (target is not None and target.attr in fields
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")):
                bad.append(f"{p.relative_to(ROOT)}:{n.lineno} writes .{target.attr}")
    assert not bad, "a reply's state written outside replies.py/reply.py:\n  " + "\n  ".join(bad)


# A conversation's parts get what they talk to in their constructors, typed by a narrow protocol
# (``TurnReports``, ``ReplyHost``): none is wired after construction (``hearing.policy = ...``,
# ``tools.replies = self``) or holds another as ``Any`` (issue 71).
PARTS = {"hearing", "replies", "tools", "turns", "policy", "idle_timeout", "mcp", "vad_turns",
         "standard"}


def test_parts_are_given_each_other_in_their_constructors():
    bad = []
    for pkg in ("core/conversation", "core/processors"):
        for path in sorted((ROOT / pkg).glob("*.py")):
            tree = ast.parse(path.read_text())
            for n in ast.walk(tree):
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                    owner = n.value.attr if isinstance(n.value, ast.Attribute) else getattr(n.value, "id", None)
                    if owner in PARTS:
                        bad.append(f"{path.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n)} = ... (wired after construction)")
                if (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Attribute) and n.target.attr in PARTS
                        and ast.unparse(n.annotation) == "Any"):
                    bad.append(f"{path.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n.target)}: Any")
    assert not bad, "parts wired after construction or held as Any:\n  " + "\n  ".join(bad)


# The turn policy hears turns (``TurnReports``: speech began, paused, resumed, ended, with the
# item id, clip and pause transcript) instead of driving the hearing's bookkeeping (issue 71: it
# called 15 of its methods).
MOST_HEARING_CALLS = 6


def test_the_turn_policy_uses_few_of_the_hearings_methods():
    tree = ast.parse((ROOT / "core" / "conversation" / "vad_turns.py").read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
            and n.value.attr == "hearing" and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"}
    assert len(used) <= MOST_HEARING_CALLS, f"vad_turns uses {len(used)} of Hearing's methods: {sorted(used)}"


# A call's audio crosses the gateway as binary frames (``core/audio_frames.py``): the call channel
# decodes no base64 and parses JSON only for the few events it acts on (issue 71).
CALL_CHANNELS = ("gateway/realtime/webrtc/channel.py", "gateway/live/webrtc.py")
PARSES_JSON = {"event_type", "_watch"}  # the events the channel owns: session.created/updated, ...


def test_the_call_channel_never_parses_audio():
    bad = []
    for rel in CALL_CHANNELS:
        tree = ast.parse((ROOT / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if "base64" in names:
                    bad.append(f"{rel}:{node.lineno}: imports base64")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in PARSES_JSON:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call) and ast.unparse(inner.func) == "json.loads":
                        bad.append(f"{rel}:{inner.lineno}: json.loads in {node.name}")
    assert not bad, "the call channel parses what it only passes on:\n  " + "\n  ".join(bad)


# The browser pages are composed of parts (issue 71): a duplex session owns a transport chosen once
# (WebRTC call or WebSocket) and a dialect adapter (Realtime or Live) that answer what differs as
# methods, so no branch asks which one it is; no class is assembled from several files' methods.
PAGE_SMELLS = re.compile(r"\baddMethods\b|\bthis\.(transport|dialect)\s*[!=]==")


def test_browser_pages_are_composed_not_branched():
    bad = []
    for path in sorted((ROOT / "static").rglob("*")):
        if path.suffix not in (".js", ".mjs", ".html") or "node_modules" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if PAGE_SMELLS.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "a page branches on its transport or dialect, or installs methods:\n  " + "\n  ".join(bad)
