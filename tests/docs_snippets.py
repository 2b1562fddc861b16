"""Reads the ```python blocks of README.md and docs/ the way a new user copies them, and names
what in them the library does not have: a ``gg.`` name, a keyword argument a call does not take,
an attribute a returned object does not carry. Static (no call is made), so it is fast and
deterministic; tests/test_docs_snippets.py runs it.

A block that is deliberately not Python-as-written is marked in the markdown, on the line
before its fence: ``<!-- snippet: skip -->`` (not compiled or checked); the same line before
a paragraph leaves that paragraph's inline code unchecked (calls shown because they are
refused). A chat verb's keywords (``gate.chat``, ``stream``, ``map``, ``batch``, a
``SyncGateway``'s too) are its own or an OpenAI chat request's fields: anything else would
go to the server as a body key, which a self-hosted server ignores without a word. Blocks without
imports are fragments: ``gg`` is then ``gptgate``, and ``gate`` a ``Gateway`` unless the
block builds it otherwise.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SKIP = "<!-- snippet: skip -->"


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the first line of code
    source: str
    skipped: bool

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        fence = re.match(r"^(\s*)```(\w*)", lines[index])
        if not fence:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            end += 1
        if fence.group(2) == "python":
            indent = len(fence.group(1))
            before = lines[index - 1].strip() if index else ""
            yield Block(path, index + 2, "\n".join(x[indent:] for x in lines[index + 1:end]),
                        before == SKIP)
        index = end + 1


# -- what a name in a block stands for ------------------------------------------------------

class Instance:
    """A value of a known class (the checker never builds one)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls


class Unknown:
    """Whatever the checker cannot follow: never reported."""


UNKNOWN = Unknown()


def _gateway_keywords() -> set[str]:
    import gptgate as gg

    taken = set(inspect.signature(gg.Gateway.__init__).parameters) - {"self", "options"}
    return taken | set(gg.GatewayConfig.model_fields)


#: the verbs whose ``**params`` are a chat request's own (sent to the server as written)
_CHAT_VERBS = ("chat", "stream", "map", "batch")


def _chat_keywords() -> set[str]:
    """What a chat verb's ``**params`` may name: ``Gateway.chat``'s own keywords and the
    OpenAI chat request's fields (``max_tokens``, ``temperature``, ...), plus ``extra_body``."""
    from openai.types.chat import completion_create_params

    import gptgate as gg

    own = set(inspect.signature(gg.Gateway.chat).parameters) - {"self", "messages", "params"}
    fields = set(completion_create_params.CompletionCreateParamsBase.__annotations__)
    return own | fields | {"extra_body", "messages"}


def _accepted(target: Any) -> set[str] | None:
    """The keywords ``target(...)`` takes; None when any is (``**kwargs`` passed on).
    A chat verb's ``**params`` are a chat request's (a ``SyncGateway`` verb's are its
    ``Gateway`` verb's): a keyword neither names is a typo the server would refuse."""
    import gptgate as gg

    if target in (gg.Gateway, gg.SyncGateway):
        return _gateway_keywords() | {"gateway"}
    name = getattr(target, "__name__", "")
    if getattr(target, "__qualname__", "").split(".")[0] in ("Gateway", "SyncGateway") and (
        name in _CHAT_VERBS
    ):
        gateway_verb = getattr(gg.Gateway, name)
        named = {n for n, p in inspect.signature(gateway_verb).parameters.items()
                 if p.kind is p.KEYWORD_ONLY}
        return named | _chat_keywords()
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return None
    fields = getattr(target, "model_fields", None) or {}  # a pydantic model's __init__(**data)
    return set(fields) | {name for name, p in signature.parameters.items()
                          if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _positional(target: Any) -> int | None:
    """How many positional arguments ``target(...)`` takes; None when any number."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    kinds = [p.kind for p in signature.parameters.values()]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return None
    return sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for k in kinds)


def _has_attribute(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    fields = getattr(cls, "model_fields", None) or {}
    if name in fields:
        return True
    if dataclasses.is_dataclass(cls) and name in {f.name for f in dataclasses.fields(cls)}:
        return True
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            return True
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"self\.{re.escape(name)}\s*(:[^=\n]*)?=", source):
            return True
    return False


def _class_named(text: str, scope: dict[str, Any]) -> Any:
    """The class an annotation names: ``ChatResult``, ``BudgetStatus | None``,
    ``dict[str, BackendStats]`` (kept as a mapping of it), else UNKNOWN."""
    import gptgate

    text = re.sub(r"\s*\|\s*None$", "", text.strip().strip("'\""))
    container = re.fullmatch(r"(?:dict\[str, |list\[|Mapping\[str, |Sequence\[)(\w+)\]", text)
    if container:
        inner = _class_named(container.group(1), scope)
        return ("items", inner) if isinstance(inner, Instance) else UNKNOWN
    if not re.fullmatch(r"\w+", text):
        return UNKNOWN
    found = scope.get(text, getattr(gptgate, text, None))
    return Instance(found) if isinstance(found, type) else UNKNOWN


def _field_type(cls: type, name: str) -> Any:
    """What a field's annotation names (``ChatResult.usage`` is a ``Usage``)."""
    import sys

    for klass in cls.__mro__:
        annotation = getattr(klass, "__annotations__", {}).get(name)
        if annotation is not None:
            if isinstance(annotation, type):
                return Instance(annotation)
            scope = vars(sys.modules.get(klass.__module__, object()))
            return _class_named(str(annotation), scope)
    return UNKNOWN


def _annotated(function: Any) -> bool:
    try:
        return inspect.signature(function).return_annotation is not inspect.Signature.empty
    except (TypeError, ValueError):
        return False


def _returns(function: Any) -> Any:
    try:
        annotation = inspect.signature(function).return_annotation
    except (TypeError, ValueError):
        return UNKNOWN
    if annotation is inspect.Signature.empty:
        return UNKNOWN
    if isinstance(annotation, type):
        return Instance(annotation)
    if isinstance(annotation, str):
        return _class_named(annotation, getattr(function, "__globals__", {}))
    return UNKNOWN


#: the SDK clients a page builds on ``gate.http_client(...)``
_SDK_CLIENTS = {"OpenAI", "AsyncOpenAI", "AzureOpenAI", "AsyncAzureOpenAI", "Anthropic",
                "AsyncAnthropic"}

#: what a gateway does only once open
_VERBS = {"chat", "stream", "map", "submit", "embed", "batch", "take_up_batch", "warm"}


def _builds_gateway(node: ast.expr) -> bool:
    """``gg.Gateway(...)`` / ``Gateway(...)`` (not a ``SyncGateway``: that opens on use)."""
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Attribute) and func.attr == "Gateway") or (
        isinstance(func, ast.Name) and func.id == "Gateway")


class Checker(ast.NodeVisitor):
    """Walks one block in order, binding names to what they stand for, and collects what a
    reader's copy of it would trip on."""

    def __init__(self, block: Block) -> None:
        import gptgate

        self.block = block
        self.problems: list[str] = []
        self.names: dict[str, Any] = {"gg": gptgate, "gptgate": gptgate,
                                      "gate": Instance(gptgate.Gateway)}
        #: gateways the block builds and has not opened yet: a call on one fails
        #: (GatewayClosedError, "not open") when the block runs as written
        self.unopened: set[str] = set()
        self.in_function = 0

    def report(self, node: ast.AST, what: str) -> None:
        line = self.block.line + getattr(node, "lineno", 1) - 1
        self.problems.append(f"{self.block.path.relative_to(ROOT)}:{line}: {what}")

    # imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not alias.name.startswith("gptgate"):
                continue
            try:
                module = importlib.import_module(alias.name)
            except ImportError as error:
                self.report(node, f"import {alias.name}: {error}")
                continue
            if alias.asname:
                self.names[alias.asname] = module

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not (node.module or "").startswith("gptgate"):
            return
        try:
            module = importlib.import_module(node.module or "")
        except ImportError as error:
            self.report(node, f"from {node.module}: {error}")
            return
        for alias in node.names:
            if not hasattr(module, alias.name):
                self.report(node, f"{node.module} has no {alias.name!r}")
                continue
            self.names[alias.asname or alias.name] = getattr(module, alias.name)

    # what an expression stands for
    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            return self.names.get(node.id, UNKNOWN)
        if isinstance(node, ast.Await):
            return self.value(node.value)
        if isinstance(node, ast.Attribute):
            owner = self.value(node.value)
            if isinstance(owner, (Unknown, tuple)):
                return UNKNOWN
            if isinstance(owner, Instance):
                if not _has_attribute(owner.cls, node.attr):
                    self.report(node, f"{owner.cls.__name__} has no attribute {node.attr!r}")
                    return UNKNOWN
                member = getattr(owner.cls, node.attr, None)
                if isinstance(member, property):
                    return _returns(member.fget)
                if callable(member):
                    return ("method", owner.cls, member)
                return _field_type(owner.cls, node.attr)
            if (inspect.ismodule(owner) and owner.__name__.startswith("gptgate")) or (
                isinstance(owner, type) and owner.__module__.startswith("gptgate")
            ):
                if inspect.ismodule(owner) and not hasattr(owner, node.attr):
                    try:  # a submodule the page names without importing it
                        return importlib.import_module(f"{owner.__name__}.{node.attr}")
                    except ImportError:
                        pass
                if not hasattr(owner, node.attr):
                    name = getattr(owner, "__name__", "?")
                    self.report(node, f"{name} has no attribute {node.attr!r}")
                    return UNKNOWN
                return getattr(owner, node.attr)
            return UNKNOWN
        if isinstance(node, ast.Subscript):
            owner = self.value(node.value)
            if isinstance(owner, tuple) and owner[0] == "items":
                return owner[1]
            return UNKNOWN
        if isinstance(node, ast.Call):
            return self.call(node)
        self.generic_visit(node)
        return UNKNOWN

    def call(self, node: ast.Call) -> Any:
        self.opened_first(node)
        self.sdk_addressed(node)
        target = self.value(node.func)
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            self.visit(argument)
        if isinstance(target, tuple) and target[0] == "method":
            _, cls, function = target
            self.keywords(node, function, f"{cls.__name__}.{function.__name__}", bound=1)
            return _returns(function)
        if isinstance(target, type) and target.__module__.startswith("gptgate"):
            self.keywords(node, target, target.__name__)
            return Instance(target)
        if callable(target) and getattr(target, "__module__", "").startswith("gptgate"):
            self.keywords(node, target, getattr(target, "__name__", "?"))
            return _returns(target)
        return UNKNOWN

    def opened_first(self, node: ast.Call) -> None:
        """A gateway the block built is opened (``async with gate``, ``await gate.start()``)
        before the block calls it — at the block's top level; in a function, the app's."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return
        name = func.value.id
        if name not in self.unopened or self.in_function:
            return
        if func.attr == "start":
            self.unopened.discard(name)
        elif func.attr in _VERBS:
            self.report(node, f"{name}.{func.attr}() on a gateway the block never opened "
                              f"(async with {name}: ...)")

    def sdk_addressed(self, node: ast.Call) -> None:
        """An SDK client on ``gate.http_client(name)`` is given the backend's URL:
        ``openai.AsyncOpenAI`` without ``base_url=`` addresses api.openai.com, which the
        gateway's client refuses (``MisaddressedRequestError``, gptgate/sdk_address.py)."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in _SDK_CLIENTS):
            return
        keywords = {k.arg: k.value for k in node.keywords}
        on_gate = keywords.get("http_client")
        if not (isinstance(on_gate, ast.Call) and isinstance(on_gate.func, ast.Attribute)
                and on_gate.func.attr == "http_client"):
            return
        if not {"base_url", "azure_endpoint"} & set(keywords):
            self.report(node, f"{func.attr}(http_client=...http_client(...)) without base_url=: "
                              "the SDK addresses its default host, not the backend's: refused")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.in_function += 1
        self.generic_visit(node)
        self.in_function -= 1

    def keywords(self, node: ast.Call, target: Any, name: str, bound: int = 0) -> None:
        """Each keyword is one ``target`` takes, and it takes that many positional arguments
        (``bound``: the ``self`` of a method read off its class)."""
        positional = _positional(target)
        # `gg.Price(...)`: "its arguments", not one argument
        given = sum(not (isinstance(a, ast.Constant) and a.value is Ellipsis) for a in node.args)
        starred = any(isinstance(arg, ast.Starred) for arg in node.args)
        if positional is not None and not starred and given > positional - bound:
            self.report(node, f"{name}() takes {positional - bound} positional argument(s), "
                              f"the page gives {given}")
        accepted = _accepted(target)
        if accepted is None:
            return
        for keyword in node.keywords:
            if keyword.arg is not None and keyword.arg not in accepted:
                self.report(node, f"{name}() takes no keyword {keyword.arg!r}")

    # statements that bind names
    def bind(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.names[target.id] = value
        else:
            self.visit(target)

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.value(node.value)
        for target in node.targets:
            self.bind(target, value)
            if isinstance(target, ast.Name):
                built = _builds_gateway(node.value) and not self.in_function
                (self.unopened.add if built else self.unopened.discard)(target.id)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.bind(node.target, self.value(node.value))

    def visit_Expr(self, node: ast.Expr) -> None:
        self.value(node.value)

    def _with(self, node: ast.With | ast.AsyncWith, enter: str) -> None:
        for item in node.items:
            if isinstance(item.context_expr, ast.Name):
                self.unopened.discard(item.context_expr.id)
            value = self.value(item.context_expr)
            if item.optional_vars is not None:
                entered = value
                method = getattr(value.cls, enter, None) if isinstance(value, Instance) else None
                if method is not None and _annotated(method):
                    entered = _returns(method)
                self.bind(item.optional_vars, entered)
        for statement in node.body:
            self.visit(statement)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        caught = self.value(node.type) if node.type is not None else UNKNOWN
        if node.name is not None:
            self.names[node.name] = Instance(caught) if isinstance(caught, type) else UNKNOWN
        for statement in node.body:
            self.visit(statement)

    def visit_With(self, node: ast.With) -> None:
        self._with(node, "__enter__")

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self._with(node, "__aenter__")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.value(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.call(node)


def check(block: Block) -> list[str]:
    try:
        tree = compile(block.source, block.where, "exec",
                       flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as error:
        return [f"{block.where}: does not compile: {error.msg} (line {error.lineno})"]
    checker = Checker(block)
    checker.visit(tree)
    return checker.problems


def inline_calls() -> Iterator[Block]:
    """Inline code in the prose that builds one of gptgate's objects (```gg.Budget(...)```),
    its ``...`` placeholders read as ``None``; a public name written bare (```Budget(...)```)
    is read as ``gg.``'s, and ``gate`` is a ``Gateway``."""
    import gptgate

    public = "|".join(name for name in gptgate.__all__ if name[0].isupper() or name == "plan")
    starts = re.compile(rf"(?:gg\.|gate\.|gptgate\.[\w.]*)\w+\(|(?:{public})\("
                        rf"|(?:openai|anthropic)\.(?:{'|'.join(_SDK_CLIENTS)})\(")
    for path in pages():
        prose, fenced = [], False  # the page with its fenced blocks blanked, lines kept
        skipping = False  # a paragraph after a SKIP line: its calls are wrong on purpose
        for line in path.read_text(encoding="utf-8").splitlines():
            fence = line.strip().startswith("```")
            skipping = (skipping or line.strip() == SKIP) and bool(line.strip())
            prose.append("" if fenced or fence or skipping else line)
            fenced ^= fence
        text = "\n".join(prose)
        for found in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
            if "\n\n" in found.group(1):
                continue  # not a span: a stray backtick's pairing across paragraphs
            number = text.count("\n", 0, found.start()) + 1
            code = _placeholders(" ".join(found.group(1).split()))  # a span may wrap a line
            if starts.match(code) and _parses(code):
                yield Block(path, number, _qualified(code), skipped=False)
                continue
            # a shape, not code (`gg.Scenario(name=..., stream=, ...)`): the calls in it that
            # are code on their own (`batch=gg.BatchPolicy(max_size, max_wait_s)`)
            for call in re.findall(rf"(?<![\w.])((?:{starts.pattern})[^()]*\))", code):
                if _parses(call):
                    yield Block(path, number, _qualified(call), skipped=False)


def _placeholders(code: str) -> str:
    """``...`` as an argument is "the other arguments", ``x=...`` some value."""
    code = code.replace("…", "...")
    code = re.sub(r"(?<=\()\s*\.\.\.\s*(,\s*)?", "", code)  # `f(...)`, `f(..., x=1)`
    code = re.sub(r",\s*\.\.\.\s*(?=[,)])", "", code)  # `f(a, ...)`, `f(a, ..., x=1)`
    return code.replace("...", "None")


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def _qualified(code: str) -> str:
    return code if code.startswith(("gg.", "gate.", "gptgate.", "openai.", "anthropic.")) else (
        f"gg.{code}")


def inline_names() -> Iterator[tuple[str, str]]:
    """Each dotted name the prose writes in code, ```gg.PROVIDERS``` or
    ```gptgate.sim.DEEPSEEK_PRICE```, with where it is (a call is checked by ``inline_calls``)."""
    for path in pages():
        text = path.read_text(encoding="utf-8")
        for found in re.finditer(r"`((?:gg|gptgate)(?:\.\w+)+)`", text):
            line = text.count("\n", 0, found.start()) + 1
            yield f"{path.relative_to(ROOT)}:{line}", found.group(1)


def _telemetry_names() -> set[str]:
    """The ``"gptgate.…"`` strings of the source: span attributes and metric names."""
    names: set[str] = set()
    for source in (ROOT / "gptgate").rglob("*.py"):
        names.update(re.findall(r"[\"'](gptgate(?:\.\w+)+)[\"']", source.read_text("utf-8")))
    return names


def unresolved(dotted: str, telemetry: set[str]) -> bool:
    """Whether ``dotted`` is neither a name of the package (a module, an attribute, a model's
    field) nor one of the span attributes and metrics it emits."""
    if dotted in telemetry:
        return False
    parts = ["gptgate", *dotted.split(".")[1:]]
    owner: Any = None
    taken = 0
    for end in range(len(parts), 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        taken = end
        break
    for part in parts[taken:]:
        if isinstance(owner, type) and _has_attribute(owner, part):
            owner = getattr(owner, part, UNKNOWN)
        elif owner is not UNKNOWN and hasattr(owner, part):
            owner = getattr(owner, part)
        elif owner is not UNKNOWN:
            return True
    return False
