"""Text-level C++ rewrites for the rules proposer; each keeps the program compiling.

Every rewrite works on a masked copy of the source in which comments and string and character
literals are blanked out (same length, so positions carry over), and declines (returns None)
whenever it cannot see that the change is safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_IDENT_CHARS = re.compile(r"[A-Za-z0-9_]")


def mask(source: str) -> str:
    """The source with comments and the insides of literals replaced by spaces."""
    out = list(source)
    length = len(source)

    def blank(start: int, end: int) -> None:
        for position in range(start, min(end, length)):
            if out[position] != "\n":
                out[position] = " "

    index = 0
    while index < length:
        char = source[index]
        if source.startswith("//", index):
            end = source.find("\n", index)
            end = length if end < 0 else end
            blank(index, end)
            index = end
        elif source.startswith("/*", index):
            end = source.find("*/", index + 2)
            end = length if end < 0 else end + 2
            blank(index, end)
            index = end
        elif char == '"' and index > 0 and source[index - 1] == "R" and _raw_string(source, index):
            raw = _raw_string(source, index)
            assert raw is not None
            closing = source.find(")" + raw.group(1) + '"', raw.end())
            end = length if closing < 0 else closing + len(raw.group(1)) + 1
            blank(index + 1, end)
            index = end + 1
        elif char in "\"'":
            if char == "'" and _is_digit_separator(source, index):
                index += 1
                continue
            end = index + 1
            while end < length and source[end] != char and source[end] != "\n":
                end += 2 if source[end] == "\\" else 1
            blank(index + 1, end)
            index = end + 1
        else:
            index += 1
    return "".join(out)


def _raw_string(source: str, index: int) -> re.Match[str] | None:
    """The opening of a raw string literal (``R"delim(``) at ``index``, if there is one."""
    return re.compile(r'"([^()\\\s]{0,16})\(').match(source, index)


def _is_digit_separator(source: str, index: int) -> bool:
    """Whether the quote at ``index`` separates digits (``1'000'000``), not a char literal."""
    start = index
    while start > 0 and (source[start - 1].isalnum() or source[start - 1] in "_'."):
        start -= 1
    return start < index and source[start].isdigit()


def matching(text: str, open_index: int) -> int:
    """Index of the bracket closing the one at ``open_index`` in masked text; -1 if none."""
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    opener = text[open_index]
    closer = pairs[opener]
    depth = 0
    for index in range(open_index, len(text)):
        char = text[index]
        if char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return index
        elif opener == "<" and char in ";{}":
            return -1
    return -1


def _depths(text: str) -> list[int]:
    """Brace depth at each position of masked text."""
    depth = 0
    result = []
    for char in text:
        if char == "}":
            depth -= 1
        result.append(depth)
        if char == "{":
            depth += 1
    return result


def _split_top_level(text: str, separator: str, angle: bool = True) -> list[tuple[int, str]]:
    """Split at separators outside brackets; each part with its offset in ``text``.

    ``angle`` counts ``<``/``>`` as brackets (template arguments), which is wrong in
    expressions, where they compare.
    """
    openers, closers = ("([{<", ")]}>") if angle else ("([{", ")]}")
    parts: list[tuple[int, str]] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char in openers:
            depth += 1
        elif char in closers:
            depth -= 1
        elif char == separator and depth == 0:
            parts.append((start, text[start:index]))
            start = index + 1
    parts.append((start, text[start:]))
    return parts


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _previous_word(text: str, index: int) -> str:
    """The identifier just before ``index`` (spaces skipped), or ""."""
    word = re.search(r"([A-Za-z_]\w*)\s*$", text[:index])
    return word.group(1) if word else ""


def _previous_token(text: str, index: int) -> str:
    """The two characters before ``index``, spaces skipped (to tell ``&`` from ``&&``)."""
    end = index
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return text[max(end - 2, 0) : end]


def _apply_edits(source: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, replacement in sorted(edits, reverse=True):
        source = source[:start] + replacement + source[end:]
    return source


# --- fast I/O ----------------------------------------------------------------------------

_C_STDIO = re.compile(
    r"\b(?:scanf|printf|puts|gets|getchar|putchar|fgets|fputs|fprintf|fscanf|fread|fwrite|"
    r"getc|putc|fgetc|fputc|getchar_unlocked|putchar_unlocked|freopen|fflush)\b"
)
_MAIN = re.compile(r"\b(?:int|signed)\s+main\s*\([^)]*\)\s*\{")


def fast_io(source: str) -> str | None:
    """Untie the C++ streams from C stdio when only the streams are used."""
    masked = mask(source)
    if not re.search(r"\b(?:cin|cout)\b", masked) or "sync_with_stdio" in masked:
        return None
    if _C_STDIO.search(masked):
        return None  # mixing stdio and unsynced streams would reorder the output
    main = _MAIN.search(masked)
    if main is None:
        return None
    untie = "\n    std::ios::sync_with_stdio(false);\n    std::cin.tie(nullptr);"
    return _apply_edits(source, [(main.end(), main.end(), untie)])


# --- endl ----------------------------------------------------------------------------------

_ENDL = re.compile(r"<<\s*(?:std\s*::\s*)?endl\b")


def endl_to_newline(source: str) -> str | None:
    """Write ``'\\n'`` instead of ``endl``, which flushes the stream every line."""
    masked = mask(source)
    edits = [(m.start(), m.end(), "<< '\\n'") for m in _ENDL.finditer(masked)]
    return _apply_edits(source, edits) if edits else None


# --- optimisation pragma ---------------------------------------------------------------------


def optimize_pragma(source: str) -> str | None:
    """Ask GCC for ``-O3`` from inside the file."""
    if re.search(r"#\s*pragma\s+GCC\s+optimize", mask(source)):
        return None
    return '#pragma GCC optimize("O3")\n' + source


# --- reserve -------------------------------------------------------------------------------

_VECTOR = re.compile(r"\b(?:std\s*::\s*)?vector\s*<")
_BOUND = re.compile(r"^(?:[A-Za-z_]\w*(?:\s*\.\s*size\s*\(\s*\))?|\d+)$")


def reserve_vectors(source: str) -> str | None:
    """Reserve a vector's capacity before a counted loop fills it with push_back."""
    masked = mask(source)
    edits: list[tuple[int, int, str]] = []
    for vector in _VECTOR.finditer(masked):
        close = matching(masked, vector.end() - 1)
        if close < 0:
            continue
        declared = re.compile(r"\s+([A-Za-z_]\w*)\s*;").match(masked, close + 1)
        if declared is None:
            continue
        name = declared.group(1)
        loop = re.compile(r"\bfor\s*\(").search(masked, declared.end())
        if loop is None:
            continue
        between = masked[declared.end() : loop.start()]
        if "{" in between or "}" in between or re.search(rf"\b{name}\b", between):
            continue  # the loop must follow in the same block, the vector untouched
        header_close = matching(masked, loop.end() - 1)
        if header_close < 0:
            continue
        header = masked[loop.end() : header_close]
        parts = [part for _, part in _split_top_level(header, ";", angle=False)]
        if len(parts) != 3:
            continue
        condition = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(<=?)\s*(.+?)\s*", parts[1])
        if condition is None or not _BOUND.match(condition.group(3)):
            continue
        counter = condition.group(1)
        step = re.sub(r"\s+", "", parts[2])
        if step not in {f"++{counter}", f"{counter}++", f"{counter}+=1"}:
            continue
        body_start = _skip_space(masked, header_close + 1)
        if body_start < len(masked) and masked[body_start] == "{":
            body_end = matching(masked, body_start)
        else:
            body_end = masked.find(";", body_start)
        if body_end < 0:
            continue
        body = masked[body_start : body_end + 1]
        if not re.search(rf"\b{name}\s*\.\s*(?:push_back|emplace_back)\s*\(", body):
            continue
        if re.search(rf"\b{name}\s*\.\s*reserve\b", masked) or re.search(
            rf"\bvector\s*<[^;]*>\s*{name}\b", body
        ):
            continue
        bound = re.sub(r"\s+", "", condition.group(3))
        if re.search(rf"\b{name}\b", bound):
            continue
        count = bound if condition.group(2) == "<" else f"{bound} + 1"
        line_start = masked.rfind("\n", 0, loop.start()) + 1
        indent = source[line_start : loop.start()]
        indent = indent if not indent.strip() else ""
        if bound.endswith(")") or bound.isdigit():
            reserve = f"{name}.reserve({count});"
        else:
            # Only a hint: a negative or absurd bound must not throw or exhaust memory.
            reserve = f"if ({count} > 0 && {count} <= 10000000) {name}.reserve({count});"
        edits.append((loop.start(), loop.start(), f"{reserve}\n{indent}"))
    return _apply_edits(source, edits) if edits else None


# --- const references ------------------------------------------------------------------------

_CONTROL = {"if", "for", "while", "switch", "return", "sizeof", "catch", "do", "else"}
_VALUE_METHODS = {"size", "empty", "length", "count", "find", "substr", "compare", "c_str"}
_ELEMENT_METHODS = {"at", "front", "back"}
_ITERATOR_METHODS = {"begin", "end", "cbegin", "cend", "rbegin", "rend"}
_READ_ONLY_CALLS = {
    "max", "min", "abs", "llabs", "fabs", "sqrt", "pow", "gcd", "__gcd", "lcm", "to_string",
    "accumulate", "lower_bound", "upper_bound", "binary_search", "max_element", "min_element",
    "count", "count_if", "find", "find_if", "equal_range", "all_of", "any_of", "none_of",
    "is_sorted", "equal", "inner_product", "printf", "make_pair", "hypot", "floor", "ceil",
}  # fmt: skip
_ASSIGNMENT = re.compile(r"(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--")


@dataclass(frozen=True)
class _Function:
    name: str
    params_start: int
    params: list[tuple[int, str]]
    body_start: int
    body_end: int


def _functions(masked: str) -> list[_Function]:
    depths = _depths(masked)
    found: list[_Function] = []
    for match in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", masked):
        name = match.group(1)
        open_paren = match.end() - 1
        if depths[match.start()] != 0 or name in _CONTROL or name == "main":
            continue
        line_start = masked.rfind("\n", 0, match.start()) + 1
        if masked[line_start:].lstrip().startswith("#"):
            continue
        close = matching(masked, open_paren)
        if close < 0:
            continue
        after = re.compile(r"\s*(?:const\s*)?(?:noexcept\s*)?\{").match(masked, close + 1)
        if after is None:
            continue
        body_start = after.end() - 1
        body_end = matching(masked, body_start)
        if body_end < 0:
            continue
        params = [
            (open_paren + 1 + offset, text)
            for offset, text in _split_top_level(masked[open_paren + 1 : close], ",")
        ]
        found.append(_Function(name, open_paren + 1, params, body_start, body_end))
    return found


def _is_mutable_reference(param: str) -> bool:
    return "&" in param and not re.search(r"\bconst\b", param)


def _callee(body: str, index: int) -> tuple[str | None, int, int]:
    """The function whose argument list encloses ``index`` (None when not in a call), with
    the position of its ``(`` and the argument's index."""
    depth = 0
    position = index - 1
    while position >= 0:
        char = body[position]
        if char in ")]":
            depth += 1
        elif char in "([":
            if depth == 0:
                if char == "[":
                    return "[", position, 0
                name = re.search(r"([A-Za-z_]\w*)\s*$", body[:position])
                argument = len(_split_top_level(body[position + 1 : index], ",", angle=False)) - 1
                return (name.group(1) if name else ""), position, argument
            depth -= 1
        elif char in "{;" and depth == 0:
            return None, -1, 0
        position -= 1
    return None, -1, 0


def _read_only_use(body: str, start: int, end: int, functions: dict[str, _Function]) -> bool:
    """Whether one occurrence of a parameter (``body[start:end]``) only reads it."""
    before = _previous_token(body, start)
    if before.endswith(("++", "--", ">>")) or (before.endswith("&") and before != "&&"):
        return False
    index = end
    element = False
    while True:
        index = _skip_space(body, index)
        if index < len(body) and body[index] == "[":
            close = matching(body, index)
            if close < 0:
                return False
            index, element = close + 1, True
            continue
        member = re.compile(r"(\.|->)\s*([A-Za-z_]\w*)\s*(\()?").match(body, index)
        if member is None:
            break
        method, called = member.group(2), member.group(3) is not None
        if not called:
            index, element = member.end(), True
            continue
        close = matching(body, member.end() - 1)
        if close < 0:
            return False
        if method in _VALUE_METHODS:
            return True
        if method in _ELEMENT_METHODS:
            index, element = close + 1, True
            continue
        if method in _ITERATOR_METHODS:
            callee, _, _ = _callee(body, start)
            return callee in _READ_ONLY_CALLS
        return False
    if _ASSIGNMENT.match(body, _skip_space(body, index)):
        return False
    callee, open_index, argument = _callee(body, start)
    if callee is None or callee == "[":
        if element:
            return True
        follows = body[_skip_space(body, index) : _skip_space(body, index) + 1]
        copied = _previous_word(body, start) == "return" or (
            before.endswith("=") and before not in {"==", "!=", "<=", ">="}
        )
        return follows == ";" and copied  # ``return v;`` or ``x = v;``: a copy
    if callee in {"if", "while", "switch"}:
        return True
    if callee == "for":
        header = body[open_index + 1 : start]
        colon = re.search(r"(?<!:):(?!:)", header)
        if colon is None:
            return element
        declaration = header[: colon.start()]
        return not _is_mutable_reference(declaration)
    if callee in _READ_ONLY_CALLS:
        return True
    target = functions.get(callee)
    if target is None:
        return False
    if element:
        return not any(_is_mutable_reference(param) for _, param in target.params)
    close = matching(body, open_index)
    arguments = _split_top_level(body[open_index + 1 : close], ",", angle=False)
    if close < 0 or len(arguments) != len(target.params):
        return False  # an overload, a default argument or a miscount: do not guess
    return not _is_mutable_reference(target.params[argument][1])


_BY_VALUE_VECTOR = re.compile(
    r"^\s*(const\s+)?((?:std\s*::\s*)?vector\s*<.*>)\s*\b([A-Za-z_]\w*)\s*$", re.DOTALL
)


def const_reference_params(source: str) -> str | None:
    """Pass vectors that a function only reads as ``const&`` instead of copying them."""
    masked = mask(source)
    functions = _functions(masked)
    by_name: dict[str, _Function] = {}
    for function in functions:
        by_name.setdefault(function.name, function)
    edits: list[tuple[int, int, str]] = []
    for function in functions:
        declared = len(re.findall(rf"\b{function.name}\s*\(", _top_level(masked)))
        if declared != 1:
            continue  # a prototype or an overload would have to change in step
        body = masked[function.body_start : function.body_end + 1]
        for offset, param in function.params:
            typed = _BY_VALUE_VECTOR.match(param)
            if (
                typed is None
                or matching(typed.group(2), typed.group(2).index("<"))
                != len(typed.group(2).rstrip()) - 1
            ):
                continue
            name = typed.group(3)
            if typed.group(1) is None:
                uses = [
                    use
                    for use in re.finditer(rf"\b{name}\b", body)
                    if not re.search(r"(?:\.|->|::)\s*$", body[: use.start()])
                ]
                if not all(_read_only_use(body, use.start(), use.end(), by_name) for use in uses):
                    continue
            type_end = offset + typed.end(2)
            edits.append((type_end, type_end, "&"))
            if typed.group(1) is None:
                type_start = offset + typed.start(2)
                edits.append((type_start, type_start, "const "))
    return _apply_edits(source, edits) if edits else None


def _top_level(masked: str) -> str:
    """Masked text with everything inside braces blanked: what is declared at file scope."""
    depths = _depths(masked)
    return "".join(
        char if depth == 0 or char == "\n" else " " for char, depth in zip(masked, depths)
    )


# --- unordered_map -------------------------------------------------------------------------

_HASHABLE_KEY = (
    r"(?:int|long|long\s+long|unsigned|unsigned\s+int|unsigned\s+long\s+long|size_t|char|"
    r"u?int(?:8|16|32|64)_t|(?:std\s*::\s*)?string)"
)
_MAP_DECLARATION = re.compile(
    rf"\b((?:std\s*::\s*)?)map\s*<\s*{_HASHABLE_KEY}\s*,[^;{{}}()]*>\s*([A-Za-z_]\w*)\s*;"
)
_MAP_SAFE_METHODS = {"count", "size", "empty", "clear", "erase", "insert", "emplace", "at", "find"}


def _map_never_iterated(masked: str, name: str, declaration: re.Match[str]) -> bool:
    for use in re.finditer(rf"\b{name}\b", masked):
        if declaration.start() <= use.start() < declaration.end():
            continue
        after = masked[use.end() :]
        if re.match(r"\s*\[", after):
            continue
        method = re.match(r"\s*\.\s*([A-Za-z_]\w*)\s*\(", after)
        if method and method.group(1) in _MAP_SAFE_METHODS:
            continue
        if method and method.group(1) == "end":
            before = masked[: use.start()]
            if re.search(r"[!=]=\s*$", before) or re.match(r"\s*\.\s*end\s*\(\s*\)\s*[!=]=", after):
                continue
        return False
    for iterator in re.finditer(rf"\b([A-Za-z_]\w*)\s*=\s*{name}\s*\.\s*find\s*\(", masked):
        it = iterator.group(1)
        if re.search(
            rf"(?:\+\+|--)\s*{it}\b|\b{it}\s*(?:\+\+|--)|\b(?:next|prev|advance)\s*\(\s*{it}\b",
            masked,
        ):
            return False  # walking from a found key depends on the order
    return True


def unordered_maps(source: str) -> str | None:
    """Use a hash map for maps keyed by numbers or strings that are never iterated."""
    masked = mask(source)
    uses_namespace = re.search(r"\busing\s+namespace\s+std\s*;", masked) is not None
    edits: list[tuple[int, int, str]] = []
    for declaration in _MAP_DECLARATION.finditer(masked):
        if not _map_never_iterated(masked, declaration.group(2), declaration):
            continue
        qualifier = declaration.group(1)
        if not qualifier and not uses_namespace:
            qualifier = "std::"
        start = declaration.start()
        map_end = masked.index("map", start + len(declaration.group(1))) + len("map")
        edits.append((start, map_end, f"{qualifier}unordered_map"))
    if not edits:
        return None
    if not re.search(r"#\s*include\s*<(?:bits/stdc\+\+\.h|unordered_map)>", masked):
        first_include = re.search(r"^[ \t]*#\s*include[^\n]*\n", masked, re.MULTILINE)
        at = first_include.end() if first_include else 0
        edits.append((at, at, "#include <unordered_map>\n"))
    return _apply_edits(source, edits)


@dataclass(frozen=True)
class CppRewrite:
    """One C++ rewrite of the rules proposer."""

    name: str
    """Short name, shown in the proposer's note."""
    description: str
    """What it does, in a few words."""
    apply: Callable[[str], str | None]
    """The rewrite; None when it does not apply."""


CPP_REWRITES: tuple[CppRewrite, ...] = (
    CppRewrite("optimize_pragma", 'add #pragma GCC optimize("O3")', optimize_pragma),
    CppRewrite("fast_io", "untie C++ streams from stdio", fast_io),
    CppRewrite("endl_to_newline", "write '\\n' instead of endl", endl_to_newline),
    CppRewrite("reserve_vectors", "reserve vectors filled in counted loops", reserve_vectors),
    CppRewrite(
        "const_reference_params", "pass read-only vectors by const&", const_reference_params
    ),
    CppRewrite("unordered_maps", "hash maps for maps never iterated", unordered_maps),
)
"""The C++ rewrites, in the order they are applied."""

DESCRIPTIONS = {rewrite.name: rewrite.description for rewrite in CPP_REWRITES}
"""What each rewrite does, by name."""


def applicable(source: str) -> list[str]:
    """The names of the rewrites that apply to ``source``, in order."""
    return [rewrite.name for rewrite in CPP_REWRITES if rewrite.apply(source) is not None]


def apply(source: str, names: tuple[str, ...]) -> str:
    """``source`` with the named rewrites applied, in order."""
    for rewrite in CPP_REWRITES:
        if rewrite.name in names:
            rewritten = rewrite.apply(source)
            if rewritten is not None:
                source = rewritten
    return source
