"""The offline proposer's rewrites of a KernelBench problem (``maxcode.llm.rules``): a
``ModelNew`` subclass of the program's ``Model`` (or of an earlier candidate's ``ModelNew``)
whose forward runs under ``torch.inference_mode()``, or compiled with ``torch.compile``, or
both."""

from __future__ import annotations

import itertools
import re

_MODEL = re.compile(r"^class\s+Model\s*\(\s*(?:torch\s*\.\s*)?nn\s*\.\s*Module\s*\)", re.M)
DESCRIPTIONS = {
    "inference_mode": "run forward under torch.inference_mode()",
    "torch_compile": "compile forward with torch.compile",
}


def applicable(source: str) -> list[str]:
    """The rewrites that apply to ``source``, in order."""
    if not _MODEL.search(source):
        return []
    found = []
    if "inference_mode" not in source:
        found.append("inference_mode")
    if "torch.compile" not in source:
        found.append("torch_compile")
    return found


def apply(source: str, names: tuple[str, ...]) -> str:
    """``source`` with a ``ModelNew`` that applies ``names``."""
    base = "Model"
    if re.search(r"^class\s+ModelNew\b", source, re.M):
        # Rewriting an earlier candidate: keep its ModelNew as the base of the new one.
        base = next(
            f"_ModelNewBase{index}"
            for index in itertools.count(1)
            if f"_ModelNewBase{index}" not in source
        )
        source = re.sub(r"\bModelNew\b", base, source)
    if not re.search(r"^import\s+torch\b", source, re.M):
        source = "import torch\n" + source
    compiled = "torch_compile" in names
    inference = "inference_mode" in names
    lines = [
        "",
        "",
        f"class ModelNew({base}):",
        f'    """{base}, {" and ".join(DESCRIPTIONS[name] for name in names)}."""',
        "",
    ]
    if compiled:
        lines += [
            "    def __init__(self, *args, **kwargs):",
            "        super().__init__(*args, **kwargs)",
            "        self._compiled_forward = torch.compile(super().forward)",
            "",
        ]
    call = "self._compiled_forward" if compiled else "super().forward"
    lines.append("    def forward(self, *args, **kwargs):")
    if inference:
        lines += [
            "        with torch.inference_mode():",
            f"            return {call}(*args, **kwargs)",
        ]
    else:
        lines.append(f"        return {call}(*args, **kwargs)")
    return source.rstrip("\n") + "\n" + "\n".join(lines) + "\n"
