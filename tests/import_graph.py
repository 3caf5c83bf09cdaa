"""The import graph of a source tree, read with `ast` (nothing is imported), for the layering tests.

Every way a module can load another counts as an edge:
- `import a.b`, `from a import b` (b a module or a name), relative imports resolved against the package;
- `importlib.import_module(...)` and `__import__(...)` with a string, an f-string (every module under
  its constant prefix), or a lookup in a module-level dict/list/tuple of strings (every string in it).
  A dynamic import whose target cannot be read this way is reported, never skipped.
- Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py`: an implicit edge to each parent package,
  along which only that package's module-level imports run (its functions, e.g. a lazy `__getattr__`,
  run only for whoever names the package itself, which is an explicit edge).

An edge is `top` (runs when the module is imported: module level, class bodies, `if`/`try` blocks)
or `lazy` (inside a function: runs when that function is called). Both are followed: whoever imports a
module may call its functions. Imports under `if TYPE_CHECKING:` count too (they name a dependency).
"""
from __future__ import annotations

import ast
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Edge:
    target: str          # a module of the tree, or the top-level name of an outside one
    line: int
    lazy: bool           # inside a function body
    ours: bool           # target is a module of the tree


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    edges: list = field(default_factory=list)
    unresolved: list = field(default_factory=list)     # (line, source text) of dynamic imports
    private_uses: list = field(default_factory=list)   # (line, module, name): a _name of another module


class Graph:
    """Modules of the top-level packages `roots` under `base`, and the imports between them."""

    def __init__(self, base: Path, roots: tuple):
        self.base = Path(base)
        self.modules: dict[str, Module] = {}
        for root in roots:
            for path in sorted((self.base / root).rglob("*.py")):
                parts = list(path.relative_to(self.base).with_suffix("").parts)
                is_package = parts[-1] == "__init__"
                if is_package:
                    parts = parts[:-1]
                name = ".".join(parts)
                self.modules[name] = Module(name, path, is_package)
        for module in self.modules.values():
            _Reader(self, module).visit(ast.parse(module.path.read_text(), str(module.path)))

    # -- resolution --------------------------------------------------------------------------------

    def ours(self, name: str) -> bool:
        return name in self.modules

    def owner(self, name: str) -> str | None:
        """The longest module of the tree that `name` (a module or module.attribute) starts with."""
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in self.modules:
                return candidate
        return None

    def parents(self, name: str) -> list:
        parts = name.split(".")
        return [p for p in (".".join(parts[:end]) for end in range(1, len(parts))) if p in self.modules]

    # -- walking -----------------------------------------------------------------------------------

    def walk(self, start: str) -> dict:
        """Every module `start` can load: (name, full) -> the chain of modules that gets there.

        full is False for a package reached only as the parent of a module it holds: importing the
        module runs the package's module-level imports, not its functions (a lazy `__getattr__`)."""
        chains = {(start, True): (start,)}
        queue = deque([(start, True)])
        while queue:
            name, full = queue.popleft()
            chain = chains[(name, full)]
            steps = [(edge.target, True) for edge in self.modules[name].edges
                     if edge.ours and (full or not edge.lazy)]
            steps += [(parent, False) for parent in self.parents(name)]
            for step in steps:
                if step not in chains and (step[0], True) not in chains:
                    chains[step] = chain + (step[0],)
                    queue.append(step)
        return chains

    def reach(self, start: str) -> dict:
        """Modules of the tree `start` depends on (not counting packages it only sits in), each with
        the shortest chain of imports from `start`."""
        return {name: chain for (name, full), chain in self.walk(start).items() if full}

    def externals(self, start: str) -> dict:
        """Outside top-level modules `start` can load (directly or through modules of the tree),
        each with the chain ending in the module that imports it."""
        found = {}
        for (name, full), chain in sorted(self.walk(start).items(), key=lambda item: len(item[1])):
            for edge in self.modules[name].edges:
                if not edge.ours and (full or not edge.lazy):
                    found.setdefault(edge.target, chain + (f"{edge.target} (line {edge.line})",))
        return found

    def cycles(self) -> list:
        """Import circles between modules (explicit edges, top-level and lazy; not the implicit
        parent-package ones), each as the strongly connected set of modules, sorted."""
        index, low, stack, on_stack, out = {}, {}, [], set(), []
        counter = [0]

        def connect(node):
            index[node] = low[node] = counter[0]
            counter[0] += 1
            stack.append(node)
            on_stack.add(node)
            for edge in self.modules[node].edges:
                if not edge.ours or edge.target == node:
                    continue
                if edge.target not in index:
                    connect(edge.target)
                    low[node] = min(low[node], low[edge.target])
                elif edge.target in on_stack:
                    low[node] = min(low[node], index[edge.target])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 10 * len(self.modules) + 100))
        try:
            for node in sorted(self.modules):
                if node not in index:
                    connect(node)
        finally:
            sys.setrecursionlimit(limit)
        return sorted(out)


class _Reader(ast.NodeVisitor):
    """Collects one module's edges, dynamic imports and uses of other modules' private names."""

    def __init__(self, graph: Graph, module: Module):
        self.graph, self.module = graph, module
        self.depth = 0                       # function nesting
        self.constants: dict = {}            # module-level NAME -> strings of its literal dict/list/tuple
        self.aliases: dict = {}              # local name -> module of the tree it is bound to

    # -- helpers -----------------------------------------------------------------------------------

    def add(self, name: str, line: int) -> None:
        owner = self.graph.owner(name)
        target = owner if owner is not None else name.split(".")[0]
        if target != self.module.name:
            self.module.edges.append(Edge(target, line, self.depth > 0, owner is not None))

    def package(self) -> str:
        return self.module.name if self.module.is_package else self.module.name.rpartition(".")[0]

    def absolute(self, module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        base = self.package().split(".")
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    # -- statements --------------------------------------------------------------------------------

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body:
            if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                strings = _strings(statement.value)
                for target in targets:
                    if isinstance(target, ast.Name) and strings:
                        self.constants[target.id] = strings
        self.generic_visit(node)

    def visit_FunctionDef(self, node) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(alias.name, node.lineno)
            if alias.asname and self.graph.ours(alias.name):
                self.aliases[alias.asname] = alias.name
            elif not alias.asname and self.graph.ours(alias.name.split(".")[0]):
                self.aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self.absolute(node.module, node.level)
        for alias in node.names:
            full = f"{base}.{alias.name}" if base else alias.name
            if self.graph.ours(full):
                self.add(full, node.lineno)
                self.aliases[alias.asname or alias.name] = full
            else:
                self.add(base, node.lineno)
                if (alias.name.startswith("_") and not alias.name.startswith("__") and self.graph.ours(base)
                        and base != self.module.name):
                    self.module.private_uses.append((node.lineno, base, alias.name))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = _dotted(node.value)
        if dotted is not None and node.attr.startswith("_") and not node.attr.startswith("__"):
            head, _, rest = dotted.partition(".")
            if head in self.aliases:
                target = self.aliases[head] + (f".{rest}" if rest else "")
                if self.graph.ours(target) and target != self.module.name:
                    self.module.private_uses.append((node.lineno, target, node.attr))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in ("import_module", "__import__") and node.args:
            targets = self.dynamic(node.args[0])
            if targets is None:
                self.module.unresolved.append((node.lineno, ast.unparse(node)))
            for target in targets or ():
                self.add(target, node.lineno)
        self.generic_visit(node)

    def dynamic(self, arg: ast.expr) -> list | None:
        """The modules a dynamic import's argument can name, or None when it cannot be read."""
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return [self.absolute(arg.value.lstrip("."), len(arg.value) - len(arg.value.lstrip(".")))
                    if arg.value.startswith(".") else arg.value]
        if isinstance(arg, ast.JoinedStr):
            # The constant text before the first and after the last placeholder bound the module.
            constant = [isinstance(part, ast.Constant) for part in arg.values]
            head = constant.index(False) if False in constant else len(constant)
            tail = constant[::-1].index(False) if False in constant else 0
            prefix = "".join(part.value for part in arg.values[:head])
            suffix = "".join(part.value for part in arg.values[len(arg.values) - tail:]) if tail else ""
            if "." not in prefix:
                return None
            return sorted(name for name in self.graph.modules
                          if name.startswith(prefix) and name.endswith(suffix)) or None
        lookup = arg.value if isinstance(arg, ast.Subscript) else arg
        if isinstance(lookup, ast.Name) and lookup.id in self.constants:
            return self.constants[lookup.id]
        return None


def _strings(value: ast.expr) -> list:
    """Strings of a literal dict (its values; a tuple value gives its first string), list, tuple or set."""
    items = value.values if isinstance(value, ast.Dict) else value.elts if isinstance(
        value, (ast.List, ast.Tuple, ast.Set)) else []
    out = []
    for item in items:
        if isinstance(item, (ast.Tuple, ast.List)) and item.elts:
            item = item.elts[0]
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            out.append(item.value)
    return out if len(out) == len(items) and out else []


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None
