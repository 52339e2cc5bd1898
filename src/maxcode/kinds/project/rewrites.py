"""Well-known rewrites of plain Python, for the offline ``rules`` proposer on project tasks.

Each rewrite reads the module's syntax tree, finds a pattern whose faster form is standard
advice, and edits the text (so comments and layout elsewhere stay). Each keeps behaviour for
the inputs the pattern is normally used with; the task's checks decide the rest:

- ``set_membership``: a parameter used only as the right side of ``in`` / ``not in`` inside a
  loop or comprehension is turned into a set once at the top of the function (O(1) lookups
  instead of a scan per test; its items must be hashable);
- ``memoize``: a module-level function that calls itself more than once (exponential
  recursion) gets ``@functools.cache`` (its arguments must be hashable, the function pure);
- ``sum_builtin``: ``total = 0`` followed by ``for x in xs: total += x`` becomes
  ``total = sum(xs)``.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from maxcode.pyast import parse


@dataclass(frozen=True)
class PythonRewrite:
    """One rewrite: its name, what it does, and the function that applies it (None when the
    pattern is not found)."""

    name: str
    description: str
    apply: Callable[[str], str | None]


def _parse(source: str) -> ast.Module | None:
    try:
        return parse(source)
    except (SyntaxError, ValueError):
        return None


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _body_start(function: ast.FunctionDef) -> ast.stmt:
    """The first statement after the docstring (where setup lines go)."""
    body = function.body
    if (
        len(body) > 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1]
    return body[0]


_LOOPS = (ast.For, ast.While, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _set_membership(source: str) -> str | None:
    tree = _parse(source)
    if tree is None:
        return None
    lines = source.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        if len(function.body) < 2 and isinstance(_body_start(function), ast.Expr):
            continue
        names = [arg.arg for arg in [*function.args.posonlyargs, *function.args.args]]
        chosen = []
        for name in names:
            in_loop_tests, other_uses = 0, 0
            for loop in ast.walk(function):
                if not isinstance(loop, _LOOPS):
                    continue
                for node in ast.walk(loop):
                    if (
                        isinstance(node, ast.Compare)
                        and len(node.ops) == 1
                        and isinstance(node.ops[0], (ast.In, ast.NotIn))
                        and isinstance(node.comparators[0], ast.Name)
                        and node.comparators[0].id == name
                    ):
                        in_loop_tests += 1
            for node in ast.walk(function):
                if isinstance(node, ast.Name) and node.id == name:
                    other_uses += 1
            # Every use of the name is such a test (each test holds one use of it).
            if in_loop_tests and other_uses == _membership_uses(function, name):
                chosen.append(name)
        if chosen:
            first = _body_start(function)
            indent = _indent_of(lines[first.lineno - 1])
            text = "".join(f"{indent}{name} = set({name})\n" for name in chosen)
            inserts.append((first.lineno - 1, text))
    if not inserts:
        return None
    for line_index, text in sorted(inserts, reverse=True):
        lines.insert(line_index, text)
    return "".join(lines)


def _membership_uses(function: ast.FunctionDef, name: str) -> int:
    """Uses of ``name`` as the right side of an ``in`` test, anywhere in the function (the
    name must be used in no other way, in or out of loops)."""
    count = 0
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and isinstance(node.comparators[0], ast.Name)
            and node.comparators[0].id == name
        ):
            count += 1
    return count


def _memoize(source: str) -> str | None:
    tree = _parse(source)
    if tree is None:
        return None
    lines = source.splitlines(keepends=True)
    targets = []
    for function in tree.body:
        if not isinstance(function, ast.FunctionDef) or function.decorator_list:
            continue
        arguments = function.args
        if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.defaults:
            continue
        calls = sum(
            1
            for node in ast.walk(function)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == function.name
        )
        if calls >= 2:
            targets.append(function)
    if not targets:
        return None
    for function in sorted(targets, key=lambda item: item.lineno, reverse=True):
        line = lines[function.lineno - 1]
        lines.insert(function.lineno - 1, f"{_indent_of(line)}@functools.cache\n")
    text = "".join(lines)
    if not any(
        isinstance(node, ast.Import) and any(alias.name == "functools" for alias in node.names)
        for node in tree.body
    ):
        text = _add_import(text, tree, "import functools")
    return text


def _add_import(text: str, tree: ast.Module, statement: str) -> str:
    """Insert an import after the module's docstring and ``__future__`` imports."""
    after = 0
    for node in tree.body:
        docstring = (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if (docstring and after == 0 and node is tree.body[0]) or future:
            after = node.end_lineno or node.lineno
        else:
            break
    lines = text.splitlines(keepends=True)
    lines.insert(after, ("\n" if after else "") + statement + "\n")
    return "".join(lines)


def _sum_builtin(source: str) -> str | None:
    tree = _parse(source)
    if tree is None:
        return None
    lines = source.splitlines(keepends=True)
    replacements: list[tuple[int, int, str]] = []
    for block in ast.walk(tree):
        body = getattr(block, "body", None)
        if not isinstance(body, list):
            continue
        for first, second in itertools.pairwise(body):
            if not (
                isinstance(first, ast.Assign)
                and len(first.targets) == 1
                and isinstance(first.targets[0], ast.Name)
                and isinstance(first.value, ast.Constant)
                and first.value.value == 0
                and type(first.value.value) is int
                and isinstance(second, ast.For)
                and isinstance(second.target, ast.Name)
                and not second.orelse
                and len(second.body) == 1
            ):
                continue
            step = second.body[0]
            total = first.targets[0].id
            if (
                isinstance(step, ast.AugAssign)
                and isinstance(step.op, ast.Add)
                and isinstance(step.target, ast.Name)
                and step.target.id == total
                and isinstance(step.value, ast.Name)
                and step.value.id == second.target.id
            ):
                iterable = ast.get_source_segment(source, second.iter)
                if iterable is None or first.lineno != first.end_lineno:
                    continue
                indent = _indent_of(lines[first.lineno - 1])
                end = second.end_lineno or second.lineno
                replacements.append((first.lineno - 1, end, f"{indent}{total} = sum({iterable})\n"))
    if not replacements:
        return None
    for start, end, text in sorted(replacements, reverse=True):
        lines[start:end] = [text]
    return "".join(lines)


PYTHON_REWRITES = (
    PythonRewrite(
        "set_membership",
        "a parameter only tested with `in` inside loops becomes a set once",
        _set_membership,
    ),
    PythonRewrite(
        "memoize",
        "a function that calls itself more than once gets @functools.cache",
        _memoize,
    ),
    PythonRewrite("sum_builtin", "a summing loop becomes sum()", _sum_builtin),
)
