"""What counts as the same program: keys that ignore comments and formatting.

C++ is read by a small tokenizer that follows the language's lexing closely enough never to
merge programs that differ in code: line splices are removed first (but not inside raw
strings), comments and the whitespace between tokens are dropped, string and character
literals are kept whole, operators are read longest first (``a - -b`` is not ``a--b``), and a
preprocessor line keeps whether its tokens were separated (``#define F(x)`` is not
``#define F (x)``). Python is compared by its parse tree; C++ sources that a kernel hands to
``load_inline`` in a string used for nothing else are compared by their C++ key. Whatever the
tokenizer cannot read is compared as before: whitespace-insensitive text.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import json
import re
import warnings

from maxcode.pyast import parse

KEY_VERSION = "maxcode-program-key-2"
"""Mixed into every key, so no key of today equals one of the whitespace keys of older runs."""

_PUNCTUATORS = (
    *("%:%:", "...", "<<=", ">>=", "->*", "<=>"),
    *("::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||"),
    *("+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##", ".*", "<:", ":>", "<%", "%>", "%:"),
)
"""Every operator longer than one character, longest first (read longest first, as the
compiler does)."""
_SPLICE = re.compile(r"\\[ \t\f\v]*\n")
_LITERAL_PREFIXES = {"u8", "u", "U", "L"}
_RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}
_HEADER_DIRECTIVES = [["include"], ["include_next"], ["import"]]
_SPACE = " "
"""Marks, inside a preprocessor line, that whitespace or a comment separated two tokens."""
_END_OF_DIRECTIVE = "\n"
_GAP = "\t"
"""Marks whitespace between tokens outside preprocessor lines; kept only when a macro
stringizes its arguments (``#x`` of ``a + b`` is not ``#x`` of ``a+b``)."""


class Unreadable(ValueError):
    """The tokenizer cannot read this source (an unterminated literal or comment)."""


def legacy_key(source: str) -> str:
    """The key of runs made before comment-blind deduplication: a hash of the text with runs of
    whitespace folded and blank lines dropped. Their evaluations are stored under it."""
    lines = (" ".join(line.split()) for line in source.splitlines())
    return hashlib.sha256("\n".join(line for line in lines if line).encode()).hexdigest()


def program_key(source: str, language: str) -> str:
    """Identity of a program for deduplication: equal for programs that differ only in comments
    and formatting, different whenever the code differs (``language``: ``cpp`` or ``python``;
    any other is compared as whitespace-insensitive text)."""
    try:
        if language == "python":
            canonical = _python_canonical(source)
        elif language == "project":
            # A bundle of files in many languages: only trailing spaces are ignored (Python's
            # indentation is code).
            canonical = "\n".join(line.rstrip() for line in source.splitlines())
        elif language in ("cpp", "cuda"):
            tokens = cpp_tokens(source)
            canonical = json.dumps(tokens)
            if "__LINE__" in tokens:  # line numbers are seen by the program: keep the layout
                canonical += "\0" + source
        else:
            return legacy_key(source)
    except (Unreadable, SyntaxError, ValueError, RecursionError, MemoryError):
        return legacy_key(source)
    payload = f"{KEY_VERSION}\0{language}\0{canonical}"
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


# --- C++ -------------------------------------------------------------------------------------


def cpp_tokens(source: str) -> list[str]:
    """The program's tokens without comments; a preprocessor line as its tokens with ``" "``
    where they were separated and ``"\\n"`` at its end. Raises ``Unreadable``."""
    physical = source.replace("\r\n", "\n")
    text, offsets = _splice(physical)
    tokens: list[str] = []
    directive: list[str] | None = None  # the tokens of the preprocessor line being read
    spaced = False
    line_start = True
    stringizes = False
    i, end = 0, len(text)

    def emit(token: str) -> None:
        nonlocal spaced, line_start
        if directive is not None:
            if spaced and len(directive) > 1:
                directive.append(_SPACE)
            directive.append(token)
        else:
            if spaced and tokens:
                tokens.append(_GAP)
            tokens.append(token)
        spaced = False
        line_start = False

    while i < end:
        char = text[i]
        if char == "\n":
            if directive is not None:
                stringizes |= _stringizes(directive)
                tokens.extend(directive)
                tokens.append(_END_OF_DIRECTIVE)
                directive = None
            spaced, line_start = False, True
            i += 1
        elif char in " \t\f\v\r":
            spaced = True
            i += 1
        elif text.startswith("//", i):
            newline = text.find("\n", i)
            i = end if newline < 0 else newline
            spaced = True
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise Unreadable("unterminated comment")
            i = close + 2
            spaced = True
        elif line_start and directive is None and (char == "#" or text.startswith("%:", i)):
            directive = []
            width = 1 if char == "#" else 2
            emit(text[i : i + width])
            i += width
        elif (
            directive is not None
            and char == "<"
            and [token for token in directive if token != _SPACE][1:] in _HEADER_DIRECTIVES
        ):
            close = text.find(">", i)
            newline = text.find("\n", i)
            if close < 0 or 0 <= newline < close:
                raise Unreadable("unterminated header name")
            emit(text[i : close + 1])
            i = close + 1
        else:
            token, i = _lex_token(text, physical, offsets, i)
            emit(token)
    if directive is not None:
        stringizes |= _stringizes(directive)
        tokens.extend(directive)
        tokens.append(_END_OF_DIRECTIVE)
    return tokens if stringizes else [token for token in tokens if token != _GAP]


def _lex_token(text: str, physical: str, offsets: list[int], i: int) -> tuple[str, int]:
    """The token that starts at ``text[i]`` (a number, a name, a literal with its prefix and
    suffix, or a punctuator) and where the next one starts. ``text`` is ``physical`` with its
    line splices removed; ``offsets`` maps one to the other (raw strings are read unspliced)."""
    char, end = text[i], len(text)
    if char.isdigit() or (char == "." and i + 1 < end and text[i + 1].isdigit()):
        start = i
        i += 1
        while i < end:
            following = text[i + 1] if i + 1 < end else ""
            exponent = text[i] in "eEpP" and following in ("+", "-")
            if exponent or (text[i] == "'" and following and _identifier_char(following)):
                i += 2
            elif _identifier_char(text[i]) or text[i] == ".":
                i += 1
            else:
                break
        return text[start:i], i
    prefix = ""
    if _identifier_char(char):
        start = i
        while i < end and _identifier_char(text[i]):
            i += 1
        prefix = text[start:i]
        if i < end and text[i] == '"' and prefix in _RAW_PREFIXES:
            stop = _raw_string_end(physical, offsets[i])
            literal = physical[offsets[i] : stop]
            i = bisect.bisect_left(offsets, stop)
            suffix = _suffix(text, i)
            return prefix + literal + suffix, i + len(suffix)
        if not (i < end and text[i] in "\"'" and prefix in _LITERAL_PREFIXES):
            return prefix, i
    if text[i] in "\"'":
        literal = _quoted(text, i)
        i += len(literal)
        suffix = _suffix(text, i)
        return prefix + literal + suffix, i + len(suffix)
    punctuator = next((p for p in _PUNCTUATORS if text.startswith(p, i)), char)
    return punctuator, i + len(punctuator)


def _stringizes(directive: list[str]) -> bool:
    """A ``#define`` whose body uses ``#`` (the spelling of its arguments matters)."""
    words = [token for token in directive if token != _SPACE]
    return words[1:2] == ["define"] and any(token in ("#", "%:") for token in words[2:])


def _identifier_char(char: str) -> bool:
    return char.isalnum() or char in "_$" or ord(char) > 127


def _splice(physical: str) -> tuple[str, list[int]]:
    """The text with line splices (backslash, optional blanks, newline) removed, and for each
    of its characters its offset in ``physical`` (plus one past the end)."""
    pieces: list[str] = []
    offsets: list[int] = []
    position = 0
    for splice in _SPLICE.finditer(physical):
        pieces.append(physical[position : splice.start()])
        offsets.extend(range(position, splice.start()))
        position = splice.end()
    pieces.append(physical[position:])
    offsets.extend(range(position, len(physical) + 1))
    return "".join(pieces), offsets


def _raw_string_end(physical: str, quote: int) -> int:
    """One past the closing quote of the raw string whose opening quote is at ``quote`` (read
    in the physical text: splices are not removed inside raw strings)."""
    opening = physical.find("(", quote + 1, quote + 18)
    delimiter = physical[quote + 1 : opening] if opening >= 0 else None
    if delimiter is None or any(char in delimiter for char in ' ()\\\t\v\f\n"'):
        raise Unreadable("malformed raw string")
    closing = physical.find(")" + delimiter + '"', opening + 1)
    if closing < 0:
        raise Unreadable("unterminated raw string")
    return closing + len(delimiter) + 2


def _quoted(text: str, start: int) -> str:
    """The string or character literal opening at ``start``, escapes included."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
        elif char == quote:
            return text[start : i + 1]
        elif char == "\n":
            break
        else:
            i += 1
    raise Unreadable("unterminated literal")


def _suffix(text: str, start: int) -> str:
    """A user-defined literal's suffix right after a literal (empty if none)."""
    i = start
    while i < len(text) and _identifier_char(text[i]):
        i += 1
    return text[start:i]


# --- Python ----------------------------------------------------------------------------------

_SOURCE_ARGUMENTS = {"cpp_sources", "cuda_sources"}


def _python_canonical(source: str) -> str:
    """The parse tree (comments and formatting gone); C++ given to ``load_inline`` in a string
    that nothing else reads is replaced by its C++ key."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes and the like: not ours to report
        tree = parse(source)
    for constant in _inline_sources(tree):
        if not isinstance(constant.value, str):
            continue
        try:
            tokens = cpp_tokens(constant.value)
        except Unreadable:
            continue
        if "__LINE__" in tokens:
            continue
        cpp = json.dumps(tokens)
        constant.value = f"{KEY_VERSION}:cpp:{hashlib.sha256(cpp.encode()).hexdigest()}"
    return ast.dump(tree)


def _inline_sources(tree: ast.Module) -> list[ast.Constant]:
    """String constants whose only use is as ``cpp_sources=``/``cuda_sources=`` of a call:
    literals written there, or a name assigned once (at module level, a string) and read
    nowhere else. Other strings are left alone: their text may be seen by the program."""
    found: list[ast.Constant] = []
    passed_names: dict[str, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg not in _SOURCE_ARGUMENTS:
                continue
            values = (
                keyword.value.elts
                if isinstance(keyword.value, (ast.List, ast.Tuple))
                else [keyword.value]
            )
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found.append(value)
                elif isinstance(value, ast.Name):
                    passed_names[value.id] = passed_names.get(value.id, 0) + 1
    if not passed_names:
        return found
    reads: dict[str, int] = {}
    writes: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            counts = reads if isinstance(node.ctx, ast.Load) else writes
            counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                writes[name] = writes.get(name, 0) + 2  # rebinding elsewhere: leave it
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            name = statement.targets[0].id
            if (
                name in passed_names
                and writes.get(name) == 1
                and reads.get(name) == passed_names[name]
            ):
                found.append(statement.value)
    return found
