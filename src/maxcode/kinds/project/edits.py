"""Multi-file answers for project tasks: named file blocks, SEARCH/REPLACE edits, unified diffs.

A model answers a project task in one of two ways:

- **named file blocks**: each changed file in full, in a fenced block whose info string names
  its path (```` ```python slowpkg/core.py ````), or right after a line naming it
  (``File: slowpkg/core.py``, ``### slowpkg/core.py``, `` `slowpkg/core.py`: ``);
- **SEARCH/REPLACE edits**, for large files: the file's path on a line of its own, then::

      <<<<<<< SEARCH
      lines as they are now
      =======
      lines to put in their place
      >>>>>>> REPLACE

  (inside a fence or not). The search text must appear in the file; the first occurrence is
  replaced. Several edits to one file apply in order.

The result is a new bundle (``maxcode.kinds.project.spec``). An answer whose edits cannot be applied
(search text not found, an unknown file, an unterminated block) gives a bundle that carries the
error: the evaluator reports it as a build error the policy can act on, never a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from maxcode.kinds.answers import CodeBlock, find_code_blocks
from maxcode.kinds.project.spec import ProjectSpec, language_of, parse_bundle, render_bundle

_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\b\s*(?P<path>\S*)\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\b\s*$")
_FENCE_LINE = re.compile(r"^\s*(`{3,}|~{3,})")
_PATH_LINE = re.compile(
    r"^\s*(?:#+\s*|[-*]\s*)?(?:\*\*)?(?:file(?:name)?\s*:?\s*)?(?:\*\*)?`?"
    r"(?P<path>[\w./+-]+)`?(?:\*\*)?\s*:?\s*$",
    re.IGNORECASE,
)


class EditError(ValueError):
    """An answer's edits cannot be applied; the message says why, for the policy."""


@dataclass(frozen=True)
class _Edit:
    path: str
    search: str
    replace: str
    line: int


def extract_project(text: str, current: str, spec: ProjectSpec) -> str | None:
    """The bundle a model's answer makes of ``current`` (the bundle it was asked to improve):
    None when the answer holds neither edits nor file blocks; a bundle carrying the error when
    its edits cannot be applied."""
    visible = _THINKING.sub("", text)
    base = parse_bundle(current).files
    try:
        changed = answer_files(visible, base, spec)
    except EditError as error:
        return render_bundle(base, error=str(error))
    if changed is None:
        return None
    return render_bundle({**base, **changed})


def answer_files(text: str, base: dict[str, str], spec: ProjectSpec) -> dict[str, str] | None:
    """The files an answer changes (path -> full new text); None when it changes none.
    Raises ``EditError`` for edits that cannot be applied."""
    edits = _search_replace_edits(text, base, spec)
    if edits is not None:
        files: dict[str, str] = {}
        for edit in edits:
            before = files.get(edit.path, base.get(edit.path))
            if before is None:
                before = _read_project_file(spec, edit.path)
            files[edit.path] = _apply(edit, before)
        return files
    return _named_blocks(text, base, spec)


def _known(path: str, base: dict[str, str], spec: ProjectSpec) -> str | None:
    """The project path an answer's name refers to: as written, without ``./``, or (when it
    is unambiguous) an editable file with that name."""
    clean = path.strip().strip("`*:'\"").removeprefix("./")
    if clean in base or clean in spec.files:
        return clean
    suffix = [name for name in base if name.endswith("/" + clean)]
    return suffix[0] if len(suffix) == 1 else None


def _unknown(path: str, spec: ProjectSpec) -> EditError:
    return EditError(f"unknown file {path!r}: the editable files are {', '.join(spec.editable)}")


def _read_project_file(spec: ProjectSpec, path: str) -> str:
    try:
        return (spec.root / path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise EditError(f"{path} cannot be edited as text") from None


def _search_replace_edits(text: str, base: dict[str, str], spec: ProjectSpec) -> list[_Edit] | None:
    lines = text.splitlines()
    if not any(_SEARCH.match(line) for line in lines):
        return None
    edits: list[_Edit] = []
    path: str | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _SEARCH.match(line)
        if opening is None:
            named = _path_named_by(line)
            if named is not None:
                path = named
            index += 1
            continue
        number = index + 1
        target = opening.group("path") or path
        if not target:
            raise EditError(f"line {number}: a SEARCH block with no file named before it")
        resolved = _known(target, base, spec)
        if resolved is None:
            raise _unknown(target, spec)
        search: list[str] = []
        index += 1
        while index < len(lines) and not _DIVIDER.match(lines[index]):
            if _SEARCH.match(lines[index]) or _REPLACE.match(lines[index]):
                raise EditError(f"line {number}: a SEARCH block without its ======= line")
            search.append(lines[index])
            index += 1
        if index >= len(lines):
            raise EditError(f"line {number}: a SEARCH block without its ======= line")
        replace: list[str] = []
        index += 1
        while index < len(lines) and not _REPLACE.match(lines[index]):
            if _SEARCH.match(lines[index]):
                raise EditError(f"line {number}: a SEARCH block without its >>>>>>> REPLACE line")
            replace.append(lines[index])
            index += 1
        if index >= len(lines):
            raise EditError(f"line {number}: a SEARCH block without its >>>>>>> REPLACE line")
        index += 1
        edits.append(_Edit(resolved, _joined(search), _joined(replace), number))
        path = resolved
    return edits


def _joined(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""


def _path_named_by(line: str) -> str | None:
    """A file path standing alone on a line (or as a fence's info string), if any."""
    fence = _FENCE_LINE.match(line)
    if fence is not None:
        words = line.strip()[len(fence.group(1)) :].split()
        for word in words:
            if "/" in word or "." in word:
                return word.split(":", 1)[-1] if ":" in word else word
        return None
    match = _PATH_LINE.match(line)
    if match is None:
        return None
    path = match.group("path")
    return path if ("." in path or "/" in path) and not path.endswith(".") else None


def _apply(edit: _Edit, before: str) -> str:
    if not edit.search.strip():
        if before.strip():
            raise EditError(
                f"line {edit.line}: an empty SEARCH for {edit.path}, which is not empty: "
                "quote the lines to replace"
            )
        return edit.replace
    position = before.find(edit.search)
    if position >= 0:
        return before[:position] + edit.replace + before[position + len(edit.search) :]
    # Models often get trailing spaces wrong: match line by line with those ignored.
    wanted = [line.rstrip() for line in edit.search.splitlines()]
    have = before.splitlines(keepends=True)
    for start in range(len(have) - len(wanted) + 1):
        if all(have[start + k].rstrip() == wanted[k] for k in range(len(wanted))):
            return "".join(have[:start]) + edit.replace + "".join(have[start + len(wanted) :])
    first = next((line for line in wanted if line.strip()), "")
    raise EditError(
        f"line {edit.line}: the SEARCH text is not in {edit.path} "
        f"(it starts {first.strip()[:80]!r}); quote the current lines exactly"
    )


def _named_blocks(text: str, base: dict[str, str], spec: ProjectSpec) -> dict[str, str] | None:
    every = find_code_blocks(text)
    named = _names_before_blocks(text.splitlines())
    files: dict[str, str] = {}
    unnamed: list[CodeBlock] = []
    for block, before in zip(every, named + [None] * (len(every) - len(named))):
        if not block.code.strip():
            continue
        name = _name_in_info(block.info) or before
        if name is None:
            unnamed.append(block)
            continue
        resolved = _known(name, base, spec)
        if resolved is None:
            if unnamed_language(block, base) and before is None:
                unnamed.append(block)
                continue
            raise _unknown(name, spec)
        if not block.complete:
            raise EditError(f"the block for {resolved} is cut off (no closing fence)")
        files[resolved] = block.code
    if files:
        return files
    if len(base) == 1:
        # One editable file: an unnamed block in its language is that file.
        (path,) = base
        tags = {language_of(path), ""}
        matching = [block for block in unnamed if block.tag in tags or _same_kind(block, path)]
        complete = [block for block in matching if block.complete]
        if complete:
            return {path: complete[-1].code}
    return None


def unnamed_language(block: CodeBlock, base: dict[str, str]) -> bool:
    """A block whose info string holds a word that is not a path of the project (a fence
    like ```` ```python title ````): treat it as unnamed."""
    return not any("/" in word for word in block.info.split()[1:])


def _same_kind(block: CodeBlock, path: str) -> bool:
    from maxcode.kinds.answers import LANGUAGE_TAGS, normalize_language

    language = normalize_language(language_of(path))
    return block.tag in LANGUAGE_TAGS.get(language, frozenset({language}))


def _name_in_info(info: str) -> str | None:
    words = info.split()
    if not words:
        return None
    first = words[0]
    if ":" in first and ("." in first or "/" in first):  # ```python:slowpkg/core.py
        return first.split(":", 1)[1]
    for word in words[1:]:
        word = word.removeprefix("path=").removeprefix("file=").strip("\"'")
        if "." in word or "/" in word:
            return word
    if "/" in first or (re.search(r"\.\w+$", first) and first not in ("c++",)):
        return first  # ```slowpkg/core.py
    return None


def _names_before_blocks(lines: list[str]) -> list[str | None]:
    """For each fenced block, the path named on the last non-empty line before it (if any)."""
    names: list[str | None] = []
    index = 0
    last_text = ""
    while index < len(lines):
        line = lines[index]
        opening = _FENCE_LINE.match(line)
        if opening is None:
            if line.strip():
                last_text = line
            index += 1
            continue
        named = _path_named_by(last_text) if last_text else None
        fence = opening.group(1)
        index += 1
        while index < len(lines):
            closing = _FENCE_LINE.match(lines[index])
            if (
                closing is not None
                and lines[index].strip() == closing.group(1)
                and closing.group(1)[0] == fence[0]
                and len(closing.group(1)) >= len(fence)
            ):
                index += 1
                break
            index += 1
        names.append(named)
        last_text = ""
    return names


# --- unified diffs (``maxcode eval TASK change.diff``) ----------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_unified_diff(diff: str, read: dict[str, str], spec: ProjectSpec) -> dict[str, str]:
    """The files a unified diff (``diff -u``, ``git diff``) makes of the project's files
    (``read``: the current texts of the editable files). Raises ``EditError``."""
    files: dict[str, str] = {}
    lines = diff.splitlines(keepends=True)
    index = 0
    target: str | None = None
    while index < len(lines):
        line = lines[index]
        if (
            line.startswith("--- ")
            and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ ")
        ):
            target = _diff_path(lines[index + 1][4:]) or _diff_path(line[4:])
            if target is None:
                raise EditError(f"line {index + 2}: a diff of a file that is not kept")
            resolved = _known(target, read, spec)
            if resolved is None:
                raise _unknown(target, spec)
            target = resolved
            if target not in files:
                files[target] = read.get(target) or _read_project_file(spec, target)
            index += 2
            continue
        hunk = _HUNK.match(line)
        if hunk is not None:
            if target is None:
                raise EditError(f"line {index + 1}: a hunk before any ---/+++ file header")
            index = _apply_hunk(lines, index, files, target)
            continue
        index += 1
    if not files:
        raise EditError("no ---/+++ file headers: not a unified diff")
    return files


def _diff_path(header: str) -> str | None:
    name = header.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def _apply_hunk(lines: list[str], index: int, files: dict[str, str], target: str) -> int:
    hunk = _HUNK.match(lines[index])
    assert hunk is not None
    start = int(hunk.group(1))
    old: list[str] = []
    new: list[str] = []
    index += 1
    while index < len(lines) and lines[index][:1] in (" ", "-", "+", "\\", "\n"):
        if lines[index].startswith(("--- ", "+++ ")) and not old and not new:
            break
        if (
            lines[index].startswith("--- ")
            and index + 1 < len(lines)
            and lines[index + 1].startswith("+++ ")
        ):
            break
        line = lines[index]
        kind, body = line[:1], line[1:]
        if kind == "\n":
            kind, body = " ", "\n"
        if kind == "\\":  # "\ No newline at end of file"
            index += 1
            continue
        if kind in (" ", "-"):
            old.append(body)
        if kind in (" ", "+"):
            new.append(body)
        index += 1
    have = files[target].splitlines(keepends=True)
    for offset in _offsets(start - 1, len(have)):
        if offset + len(old) <= len(have) and [
            line.rstrip("\n") for line in have[offset : offset + len(old)]
        ] == [line.rstrip("\n") for line in old]:
            files[target] = "".join(have[:offset] + new + have[offset + len(old) :])
            return index
    raise EditError(f"a hunk at line {start} of {target} does not match the file")


def _offsets(expected: int, size: int) -> list[int]:
    """Positions to try for a hunk, nearest to where its header says first."""
    order = [expected]
    for distance in range(1, size + 1):
        order += [expected - distance, expected + distance]
    return [position for position in order if 0 <= position <= size]
