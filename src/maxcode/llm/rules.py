"""The offline ``rules`` proposer: a deterministic, non-LLM policy.

It lets the whole search run without a model (offline demos, tests, CI) and gives a baseline
any LLM must beat. It is a real provider: it takes the same ``LLMRequest`` and answers with
completions whose text holds one fenced code block, at no cost and zero tokens.

**Convention.** The program to rewrite is the LAST fenced code block of the LAST user message
of the request. Prompt builders put the current program (the best so far) there.

It detects the language (C++, or Python/PyTorch in the KernelBench format) and applies
rewrites known to keep a program valid:

- C++ (text level, ``maxcode.kinds.cpp.rewrites``): ``#pragma GCC optimize("O3")``; untied streams
  (``sync_with_stdio(false)``, ``cin.tie(nullptr)``) when no C stdio is mixed in; ``'\\n'``
  for ``endl``; ``reserve`` before counted push_back loops; ``const&`` for vector parameters
  that are only read; ``unordered_map`` for maps keyed by numbers or strings that are never
  iterated.
- KernelBench (a ``class Model(nn.Module)``, ``maxcode.kinds.kernelbench.rewrites``): a
  ``ModelNew`` subclass that runs the forward pass under ``torch.inference_mode()``, and one
  whose forward is ``torch.compile``d.
- Projects (the program is a bundle of files named in their fences, after the last heading of
  the message): plain-Python rewrites of its ``.py`` files (``maxcode.kinds.project.rewrites``:
  set membership, memoized recursion, ``sum``); the answer names each changed file in its
  fence.

Asked for several completions (n > 1, or the same program again in a later call), it answers
with different combinations of the rewrites that apply, in a fixed order: all of them, then
each one alone, then each pair, and so on; after the last it starts over. When nothing
applies it returns the program unchanged, with a note saying so.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from maxcode.kinds.answers import LANGUAGE_TAGS, find_code_blocks
from maxcode.kinds.cpp import rewrites as cpp_rewrites
from maxcode.kinds.kernelbench import rewrites as torch_rewrites
from maxcode.llm._provider import LLMProvider, ProviderReply, ProviderSettings
from maxcode.llm._records import LLMRequest

NO_MODEL_MESSAGE = (
    "no model configured; using the offline rules proposer; pass --model for LLM search"
)
"""What the command line says when it falls back to the rules proposer."""


@dataclass(frozen=True)
class Variant:
    """One rewritten program."""

    applied: tuple[str, ...]
    """Names of the rewrites applied, in order."""
    code: str
    """The rewritten program."""


# --- PyTorch / KernelBench -------------------------------------------------------------------

# --- shared ----------------------------------------------------------------------------------


def detect_language(code: str, tag: str = "") -> str | None:
    """``cpp``, ``python`` or None, from a fence tag and the code itself."""
    tag = tag.lower()
    if tag in LANGUAGE_TAGS["python"] or re.search(
        r"^\s*(?:import\s+torch|from\s+torch\b)|nn\.Module", code, re.M
    ):
        return "python"
    if tag in LANGUAGE_TAGS["cpp"] or re.search(r"^\s*#\s*include\b|\bint\s+main\s*\(", code, re.M):
        return "cpp"
    return None


class _Rewriter(NamedTuple):
    """A kind's offline rewrites of one program."""

    applicable: Callable[[str], list[str]]
    """The names of the rewrites that apply to a program, in order."""
    apply: Callable[[str, tuple[str, ...]], str]
    """The program with the named rewrites applied."""
    descriptions: dict[str, str]
    """What each rewrite does, by name."""


_LANGUAGES: dict[str, _Rewriter] = {
    "cpp": _Rewriter(cpp_rewrites.applicable, cpp_rewrites.apply, cpp_rewrites.DESCRIPTIONS),
    "python": _Rewriter(
        torch_rewrites.applicable, torch_rewrites.apply, torch_rewrites.DESCRIPTIONS
    ),
}
"""The rewrites of each language the proposer reads (``detect_language``)."""


def _combinations(names: list[str]) -> list[tuple[str, ...]]:
    """All rewrites first, then each alone, then pairs, ...: the most promising first."""
    if not names:
        return []
    order = [tuple(names)]
    for size in range(1, len(names)):
        order += list(itertools.combinations(names, size))
    return order


def rewrite_variants(program: str, language: str) -> list[Variant]:
    """The distinct rewritten programs, in the proposer's order; empty when nothing applies."""
    if language not in _LANGUAGES:
        return []
    rewriter = _LANGUAGES[language]
    variants: list[Variant] = []
    seen = {program}
    for names in _combinations(rewriter.applicable(program)):
        code = rewriter.apply(program, names)
        if code not in seen:
            seen.add(code)
            variants.append(Variant(applied=names, code=code))
    return variants


def _describe(language: str, names: tuple[str, ...]) -> str:
    descriptions = _LANGUAGES[language].descriptions
    return "; ".join(f"{name} ({descriptions[name]})" for name in names)


def current_program(request: LLMRequest) -> tuple[str, str] | None:
    """The program of a request by the proposer's convention, with its fence tag."""
    for message in reversed(request.messages):
        if message.role == "user":
            blocks = [block for block in find_code_blocks(message.content) if block.code.strip()]
            return (blocks[-1].code, blocks[-1].tag) if blocks else None
    return None


def current_project(request: LLMRequest) -> dict[str, str] | None:
    """A project's files in a request: the fenced blocks named by path (``python a/b.py``)
    after the last heading of the last user message; None when there are none."""
    for message in reversed(request.messages):
        if message.role != "user":
            continue
        lines = message.content.splitlines(keepends=True)
        fence: str | None = None
        last_heading = 0
        for number, line in enumerate(lines):
            stripped = line.strip()
            if fence is None and stripped.startswith("#") and not stripped.startswith("#!"):
                last_heading = number
            opening = re.match(r"^(`{3,}|~{3,})", stripped)
            if opening:
                if fence is None:
                    fence = opening.group(1)
                elif stripped == opening.group(1) and len(opening.group(1)) >= len(fence):
                    fence = None
        files = {}
        for block in find_code_blocks("".join(lines[last_heading:])):
            words = block.info.split()
            if block.complete and len(words) >= 2 and ("/" in words[1] or "." in words[1]):
                files[words[1]] = block.code
        return files or None
    return None


class RulesProvider(LLMProvider):
    """The offline proposer as a provider (``rules``)."""

    provider_name = "rules"
    free = True
    cacheable = False  # it answers differently each time it sees a program, by design

    def __init__(
        self,
        model: str = "rules",
        settings: ProviderSettings | None = None,
        *,
        provider_name: str | None = None,
    ) -> None:
        super().__init__(model, settings, provider_name=provider_name)
        self._served: dict[str, int] = {}
        self._variants: dict[str, list[Variant]] = {}
        self._project_variants: dict[str, list[tuple[tuple[str, ...], dict[str, str]]]] = {}

    def estimate_usage(self, request: LLMRequest) -> tuple[int, int]:
        """The proposer uses no tokens."""
        return 0, 0

    def propose(self, request: LLMRequest, n: int) -> list[str]:
        """The texts of the next ``n`` answers for a request (advances the rotation)."""
        files = current_project(request)
        if files is not None:
            return self._propose_project(files, request, n)
        found = current_program(request)
        if found is None:
            note = (
                "Offline rules proposer: no program found (it reads the last fenced code block "
                "of the last user message); nothing to rewrite."
            )
            return [note] * n
        program, tag = found
        language = detect_language(program, tag)
        fence = tag or (language or "")
        key = hashlib.sha256(program.encode("utf-8")).hexdigest()
        if key not in self._variants:
            self._variants[key] = rewrite_variants(program, language) if language else []
        variants = self._variants[key]
        if not variants:
            note = (
                "Offline rules proposer: no rewrite applies to this program; "
                "returning it unchanged."
            )
            return [f"{note}\n\n```{fence}\n{program.rstrip()}\n```\n"] * n
        # A caller that needs the same answers on a replay (``--resume``) says where to start.
        offset = request.options.get("variant_offset")
        start = int(offset) if offset is not None else self._served.get(key, 0)
        self._served[key] = start + n
        texts = []
        for index in range(start, start + n):
            variant = variants[index % len(variants)]
            note = f"Offline rules proposer: applied {_describe(language or '', variant.applied)}."
            texts.append(f"{note}\n\n```{fence}\n{variant.code.rstrip()}\n```\n")
        return texts

    def _propose_project(self, files: dict[str, str], request: LLMRequest, n: int) -> list[str]:
        """Answers for a project: each a combination of the Python rewrites that apply, with
        every file it changes in a fenced block named by its path."""
        from maxcode.kinds.project.rewrites import PYTHON_REWRITES
        from maxcode.kinds.project.spec import render_bundle

        rewrites = {rewrite.name: rewrite for rewrite in PYTHON_REWRITES}
        key = hashlib.sha256(render_bundle(files).encode("utf-8")).hexdigest()
        if key not in self._project_variants:
            applicable = [
                f"{name}@{path}"
                for path in sorted(files)
                if path.endswith(".py")
                for name, rewrite in rewrites.items()
                if rewrite.apply(files[path]) is not None
            ]
            variants: list[tuple[tuple[str, ...], dict[str, str]]] = []
            seen: set[str] = set()
            for names in _combinations(applicable):
                changed: dict[str, str] = {}
                for qualified in names:
                    name, path = qualified.split("@", 1)
                    rewritten = rewrites[name].apply(changed.get(path, files[path]))
                    if rewritten is not None:
                        changed[path] = rewritten
                text = render_bundle(changed)
                if changed and text not in seen:
                    seen.add(text)
                    variants.append((names, changed))
            self._project_variants[key] = variants
        found = self._project_variants[key]
        if not found:
            note = "Offline rules proposer: no Python rewrite applies to these files."
            return [note] * n
        offset = request.options.get("variant_offset")
        start = int(offset) if offset is not None else self._served.get(key, 0)
        self._served[key] = start + n
        texts = []
        for index in range(start, start + n):
            names, changed = found[index % len(found)]
            applied = "; ".join(
                f"{name} in {path} ({rewrites[name].description})"
                for name, path in (qualified.split("@", 1) for qualified in names)
            )
            note = f"Offline rules proposer: applied {applied}."
            texts.append(f"{note}\n\n{render_bundle(changed)}")
        return texts

    async def _complete_once(self, request: LLMRequest, n: int) -> ProviderReply:
        texts = self.propose(request, n)
        return ProviderReply(
            texts=texts,
            finish_reasons=["stop"] * n,
            prompt_tokens=0,
            completion_tokens=0,
            model=self.model,
        )
