"""Finding the program in a model's answer.

Models put code in fenced blocks, surrounded by prose, sometimes several blocks (a sketch,
then the final version), sometimes a block cut off by the output limit. The rules:

- blocks tagged with the task's language win over untagged ones; blocks tagged with another
  language (```bash, ```text) are never taken;
- among the candidates, the last complete block wins (models end with their final version);
- when no complete candidate exists, an unterminated final fence yields what follows it;
- reasoning wrapped in ``<think>...</think>`` (some open models) is skipped;
- an answer without code gives None: a normal outcome the search records, not an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LANGUAGE_TAGS: dict[str, frozenset[str]] = {
    "cpp": frozenset({"cpp", "c++", "cc", "cxx", "hpp", "hxx", "h", "c"}),
    "python": frozenset({"python", "py", "python3", "py3"}),
    "cuda": frozenset({"cuda", "cu"}),
}
"""Fence tags accepted for each language."""

_LANGUAGE_ALIASES = {
    "c++": "cpp",
    "cxx": "cpp",
    "cc": "cpp",
    "py": "python",
    "pytorch": "python",
    "torch": "python",
    "kernelbench": "python",
    "cu": "cuda",
}

_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*?)[ \t]*$")
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of an answer."""

    tag: str
    """The fence's language tag, lower case (first word of the info string); "" if none."""
    code: str
    """The block's content, without the fences."""
    complete: bool
    """Whether a closing fence was found."""
    info: str = ""
    """The whole info string of the opening fence (``python slowpkg/core.py``)."""


def normalize_language(language: str) -> str:
    """The canonical name of a language or task kind (``c++`` → ``cpp``, ``kernelbench`` →
    ``python``)."""
    lowered = language.strip().lower()
    return _LANGUAGE_ALIASES.get(lowered, lowered)


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block of a text, in order; the last may be incomplete."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening.group("fence")
        info = opening.group("info").strip()
        tag = info.split()[0].lower() if info else ""
        body: list[str] = []
        index += 1
        closed = False
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (
                closing is not None
                and not closing.group("info").strip()
                and closing.group("fence")[0] == fence[0]
                and len(closing.group("fence")) >= len(fence)
            ):
                closed = True
                index += 1
                break
            body.append(lines[index])
            index += 1
        code = "\n".join(body)
        blocks.append(
            CodeBlock(tag=tag, code=code + "\n" if code else "", complete=closed, info=info)
        )
    return blocks


def extract_code(text: str, language: str) -> str | None:
    """The program in a model's answer, or None when it has none (see the module rules)."""
    canonical = normalize_language(language)
    tags = LANGUAGE_TAGS.get(canonical, frozenset({canonical}))
    visible = _THINKING.sub("", text)
    blocks = [block for block in find_code_blocks(visible) if block.code.strip()]
    tagged = [block for block in blocks if block.tag in tags]
    untagged = [block for block in blocks if block.tag == ""]
    for group in (tagged, untagged):
        complete = [block for block in group if block.complete]
        if complete:
            return complete[-1].code
    if blocks and not blocks[-1].complete and (blocks[-1].tag in tags or blocks[-1].tag == ""):
        return blocks[-1].code
    return None
