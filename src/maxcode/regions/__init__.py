"""Where a whole model's forward spends its time, in pieces a kernel could replace.

``find_regions`` runs a KernelBench-format model file (``Model``, ``get_inputs``,
``get_init_inputs``) in a process of its own (``probe``), timing every module and recording
what each is called with and which operators it runs, and cuts the forward into **regions**
(``choose``): modules that run at most ``MOST_HEAVY`` heavy operators (matrix products,
convolutions, recurrences) with the light ones around them, or whose own ``forward`` holds work
a kernel would fuse (most of their heavy operators, or more than ``1 - COVERED`` of their
time); larger modules are cut into their submodules. Alike regions (the same type, shapes and
operators: the six layers of a transformer) are one, since one kernel serves them all. What no
region holds (a residual add in the model's own ``forward``) is reported as outside.
``write_region`` writes a region as an ordinary KernelBench problem (``maxcode eval``,
``optimize`` and ``bench`` take it as any other).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maxcode.errors import TaskError
from maxcode.kinds.kernelbench.problem import (
    KernelBenchTask,
    load_kernelbench_problem,
    reference_failure,
)

HEAVY = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "matmul",
        "convolution",
        "_convolution",
        "cudnn_convolution",
        "mkldnn_convolution",
        "lstm",
        "gru",
        "rnn_tanh",
        "rnn_relu",
        "mkldnn_rnn_layer",
        "_cudnn_rnn",
        "_thnn_fused_lstm_cell",
        "_thnn_fused_gru_cell",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    }
)
"""The aten operators that carry a model's arithmetic: one kernel holds one or two of them
with what surrounds them."""

MOST_HEAVY = 2
"""The most heavy operator calls a region runs before it is cut into its submodules."""

COVERED = 0.9
"""A module is cut when its submodules account for this share of its time; one they do not
(work in its own ``forward``: residual adds, activations, attention's arithmetic) stays whole
while it runs at most ``MOST_KEPT`` heavy operators, since cutting it leaves that work in no
region."""

MOST_KEPT = 8
"""The most heavy operator calls of a module kept whole for the work in its own ``forward``
(a residual block, a transformer layer); a larger one is cut however much that leaves out."""


PROBE_TIMEOUT_S = 600
"""The longest the probe may take (its forward runs ``repeats`` + 2 times)."""


@dataclass
class ModuleRun:
    """One module as the probe saw it (``probe.describe`` for the values)."""

    path: str
    type: str
    seconds: float
    calls: int
    children: list[str]
    inputs: list[dict[str, Any]]
    kwargs: dict[str, dict[str, Any]]
    outputs: list[dict[str, Any]]
    operators: dict[str, int]
    aliases: bool = False
    """A result shares memory with an argument (it works in place, or returns a view)."""
    returns: dict[str, Any] = field(default_factory=dict)
    """What its first call returned, nested (``probe.describe``): how a stitched model puts a
    region kernel's flat results back together."""
    times: list[float] = field(default_factory=list)
    """Its seconds in each timed forward (``seconds`` is the least)."""
    sequential: bool = False
    """A plain ``nn.Sequential``: its children feed each other in order."""
    span: tuple[int, int] | None = None
    """A run of a Sequential's children (``path[start:stop]``) taken as one module."""

    @property
    def name(self) -> str:
        if self.span is not None:
            return f"{self.path}[{self.span[0]}:{self.span[1]}]"
        return self.path or "(the whole model)"

    @property
    def heavy(self) -> int:
        return sum(count for name, count in self.operators.items() if name in HEAVY)


def _joined(container: ModuleRun, start: int, members: list[ModuleRun]) -> ModuleRun:
    """``members``, children ``start``... of the Sequential ``container``, as one module."""
    if len(members) == 1:
        return members[0]
    operators: dict[str, int] = {}
    for member in members:
        for name, count in member.operators.items():
            operators[name] = operators.get(name, 0) + count
    return ModuleRun(
        path=container.path,
        type="+".join(member.type for member in members),
        seconds=sum(member.seconds for member in members),
        calls=members[0].calls,
        children=[],
        inputs=members[0].inputs,
        kwargs={},
        outputs=members[-1].outputs,
        returns=members[-1].returns,
        aliases=all(member.aliases for member in members),  # a chain of in-place steps
        operators=operators,
        span=(start, start + len(members)),
    )


def _runs(container: ModuleRun, children: list[ModuleRun]) -> list[ModuleRun]:
    """A Sequential's children in runs a kernel would fuse: each heavy child with the light
    ones after it (light ones before the first heavy child are a run of their own)."""
    runs: list[tuple[int, list[ModuleRun]]] = []
    for index, child in enumerate(children):
        if child.heavy or not runs or child.sequential or runs[-1][1][-1].sequential:
            runs.append((index, [child]))
        else:
            runs[-1][1].append(child)
    return [_joined(container, start, members) for start, members in runs]


@dataclass
class Region:
    """A piece of the forward: a module, its share of the forward's time, and what bounds the
    model if it cost nothing (Amdahl)."""

    module: ModuleRun
    share: float
    written: Path | str | None = None
    """With ``--out``: the problem file written, or why it could not be."""
    alike: list[ModuleRun] = field(default_factory=list)
    """The other modules this region stands for (``alike``): one kernel serves them all; the
    share is theirs together, the problem is written for ``module``."""

    @property
    def name(self) -> str:
        names = [self.module.name] + [other.name for other in self.alike]
        if len(names) == 1:
            return names[0]
        parts = [re.split(r"([.\[\]:])", name) for name in names]
        if len({len(split) for split in parts}) > 1:
            return f"{names[0]} and {len(names) - 1} alike"
        return "".join(
            column[0] if len(set(column)) == 1 else _common_start(column) + "*"
            for column in zip(*parts, strict=True)
        )

    @property
    def bound(self) -> float | None:
        """The model's speedup if this region took no time (None: it is the whole forward)."""
        left = 1.0 - self.share
        return 1.0 / left if left > 1e-6 else None

    def as_json(self) -> dict[str, Any]:
        module = self.module
        return {
            "name": self.name,
            "type": module.type,
            "share": self.share,
            "seconds": module.seconds,
            "calls": module.calls,
            "modules": [module.name] + [other.name for other in self.alike],
            "bound": self.bound,
            "operators": sorted(
                module.operators, key=lambda op: (op not in HEAVY, -module.operators[op])
            ),
            "heavy": module.heavy,
            "inputs": module.inputs,
            "outputs": module.outputs,
            **(
                {"problem": str(self.written)}
                if isinstance(self.written, Path)
                else {"not_written": self.written}
                if self.written
                else {}
            ),
        }


@dataclass
class Regions:
    """A model's forward cut into regions, ranked by share."""

    problem: Path
    scale: float
    device: str
    forward_s: float
    regions: list[Region]
    modules: dict[str, ModuleRun] = field(repr=False)
    source: str = field(repr=False)
    """The problem's source at ``scale`` (what was run, and what region problems start from)."""
    report: dict[str, Any] = field(default_factory=dict, repr=False)
    """The probe's report the regions were cut from (``cut_regions`` rebuilds them from it)."""

    @property
    def outside(self) -> float:
        """The share of the forward no region accounts for."""
        return max(0.0, 1.0 - sum(region.share for region in self.regions))

    def as_json(self) -> dict[str, Any]:
        return {
            "problem": str(self.problem),
            "scale": self.scale,
            "device": self.device,
            "forward_s": self.forward_s,
            "outside": self.outside,
            "regions": [region.as_json() for region in self.regions],
        }


def find_regions(
    problem: str | Path, *, scale: float = 1.0, device: str = "cpu", repeats: int = 10
) -> Regions:
    """Run ``problem``'s forward in a process of its own and cut it into regions."""

    path = Path(problem)
    if path.is_dir():
        raise TaskError(f"{path}: a folder; a model is a KernelBench-format .py file")
    if not path.is_file():
        raise TaskError(f"{path}: no such model file")
    task = load_kernelbench_problem(path, scale)
    return cut_regions(path, scale, device, _probe(task, device, repeats), task.reference)


def cut_regions(
    path: Path, scale: float, device: str, report: dict[str, Any], source: str
) -> Regions:
    """The regions of the forward the probe's ``report`` describes (``Regions.report``): the
    same report always gives the same regions, so a stored one rebuilds them."""
    hook_s = float(report.get("hook_s", 0.0))
    calls = {entry["path"]: int(entry["calls"]) for entry in report["modules"]}

    def own_times(entry: dict[str, Any]) -> list[float]:
        """The module's time in each forward, less its submodules' hooks (``hook_seconds``)."""
        prefix = f"{entry['path']}." if entry["path"] else ""
        nested = sum(count for path, count in calls.items() if path and path.startswith(prefix))
        return [max(0.0, float(seconds) - hook_s * nested) for seconds in entry["times"]]

    timed = {entry["path"]: own_times(entry) for entry in report["modules"]}
    modules = {
        entry["path"]: ModuleRun(
            path=entry["path"],
            type=entry["type"],
            seconds=min(timed[entry["path"]]),
            times=timed[entry["path"]],
            calls=int(entry["calls"]),
            children=list(entry["children"]),
            inputs=entry["inputs"],
            kwargs=entry["kwargs"],
            outputs=entry["outputs"],
            returns=entry.get("returns", {}),
            aliases=bool(entry.get("aliases")),
            operators=dict(entry["operators"]),
            sequential=bool(entry.get("sequential")),
        )
        for entry in report["modules"]
    }
    forward = modules[""].seconds if "" in modules else float(report["forward_s"])
    tree = {name: list(children) for name, children in report["tree"].items()}
    families: dict[str, list[ModuleRun]] = {}
    for module in choose(modules, tree):
        families.setdefault(alike(module), []).append(module)
    root = modules.get("")
    ranked = sorted(
        (
            Region(family[0], covered_share(root, family) if root else 0.0, alike=family[1:])
            for family in families.values()
        ),
        key=lambda region: -region.share,
    )
    return Regions(path, scale, device, forward, ranked, modules, source, report)


def _probe(task: KernelBenchTask, device: str, repeats: int) -> dict[str, Any]:
    path = Path(task.origin)
    with tempfile.TemporaryDirectory(prefix="maxcode-regions-") as scratch:
        copy = Path(scratch) / path.name
        copy.write_text(task.reference, encoding="utf-8")
        command = [sys.executable, "-m", "maxcode.regions.probe", str(copy), device, str(repeats)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise TaskError(
                f"{path}: the forward did not finish {repeats + 2} runs in {PROBE_TIMEOUT_S} s"
                " (try a smaller --scale)"
            ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit {done.returncode}"
        raise TaskError(reference_failure(task, why).replace("the reference", "the model"))
    try:
        report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TaskError(f"{path}: the probe printed no report") from None
    return report


def _common_start(texts: tuple[str, ...]) -> str:
    shared = ""
    for letters in zip(*texts, strict=False):
        if len(set(letters)) > 1:
            break
        shared += letters[0]
    return shared


def alike(module: ModuleRun) -> str:
    """What makes two regions one kernel's work: the module's type, what it is given, what it
    returns and the operators it runs (its weights' values may differ: they are inputs to a
    kernel)."""
    return json.dumps(
        [module.type, module.inputs, module.kwargs, module.outputs, module.operators],
        sort_keys=True,
    )


def covered_share(module: ModuleRun, below: list[ModuleRun]) -> float:
    """The share of ``module``'s time its submodules ``below`` take: the median over the timed
    forwards of their sum over its time in the same forward (a forward the machine slowed
    slows both; a pause between submodules is one forward's, not the verdict). A region's
    share is this with the model as ``module``."""
    rounds = len(module.times)
    if not rounds or any(len(child.times) != rounds for child in below):
        return sum(child.seconds for child in below) / max(module.seconds, 1e-12)
    return statistics.median(
        sum(child.times[r] for child in below) / max(module.times[r], 1e-12) for r in range(rounds)
    )


def choose(modules: dict[str, ModuleRun], tree: dict[str, list[str]]) -> list[ModuleRun]:
    """The regions, from the model down: a module is cut into its called submodules (the
    nearest, through containers the forward never calls) when it runs more than ``MOST_HEAVY``
    heavy operators, its submodules run more of them than its own ``forward`` does, and they
    account for ``COVERED`` of its time (or it runs more than ``MOST_KEPT``); otherwise it is
    a region, if it runs any operator. A plain ``nn.Sequential`` is cut into runs of its
    children (``_runs``)."""
    chosen: list[ModuleRun] = []

    def called_below(path: str) -> list[ModuleRun]:
        found: list[ModuleRun] = []
        for child in tree.get(path, []):
            if child in modules:
                found.append(modules[child])
            else:
                found += called_below(child)
        return found

    def visit(module: ModuleRun) -> None:
        below = called_below(module.path)
        held = sum(child.heavy for child in below)
        covered = covered_share(module, below) >= COVERED
        if (
            below
            and module.heavy > MOST_HEAVY
            and held > module.heavy - held
            and (covered or module.heavy > MOST_KEPT)
        ):
            direct = module.sequential and [child.path for child in below] == tree[module.path]
            for child in _runs(module, below) if direct else below:
                if child.span is None:
                    visit(child)
                else:
                    chosen.append(child)
        elif module.operators:  # one that runs none (an identity, dropout at inference) is none
            chosen.append(module)

    root = modules.get("")
    if root is None:
        return []
    visit(root)
    return chosen


def region_file_name(rank: int, region: Region) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", region.module.name if region.module.path else "model")
    slug = slug.strip("_")
    return f"{rank}_{slug}.py"


def write_region(regions: Regions, region: Region, folder: Path, rank: int) -> Path | str:
    """``region`` as a KernelBench problem in ``folder``: the model's source at its scale, then
    a ``Model`` that computes exactly that module with the weights the whole model is built
    with (seed 0, as the probe built it), and ``get_inputs`` drawing fresh inputs like those
    the forward gave it. The path written, or why it cannot be (an input it cannot draw)."""
    module = region.module
    if module.aliases:
        return (
            f"{module.name} returns memory of its input (in place, or a view); a problem's "
            "program must return new tensors"
        )
    arguments: list[str] = []
    parameters: list[str] = []
    makers: list[str] = []
    for value in module.inputs:
        if "same_as" in value:
            arguments.append(arguments[value["same_as"]])
            continue
        made = _maker(value)
        if made is None:
            return f"an input of {module.name} is a {_kind(value)}"
        if "value" not in value:
            name = f"x{len(parameters)}"
            parameters.append(name)
            makers.append(made)
            arguments.append(name)
        else:
            arguments.append(made)
    for key, value in module.kwargs.items():
        if "value" not in value:
            return f"the keyword {key} of {module.name} is a {_kind(value)}"
        arguments.append(f"{key}={value['value']}")
    text = _REGION_TEMPLATE.format(
        source=regions.source.rstrip(),
        name=region.name,
        type=module.type,
        problem=regions.problem.name,
        scale=f"{regions.scale:g}",
        share=f"{100 * region.share:.1f}",
        path=module.path,
        span="" if module.span is None else f"[{module.span[0]}:{module.span[1]}]",
        parameters=", ".join(["self", *parameters]),
        arguments=", ".join(arguments),
        inputs=", ".join(makers),
    )
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / region_file_name(rank, region)
    target.write_text(text, encoding="utf-8")
    return target


def _kind(value: dict[str, Any]) -> str:
    """What a value no problem can draw is (``probe.describe``): the first such inside it."""
    for item in value.get("tuple", value.get("list", [])):
        if _maker(item) is None:
            return _kind(item)
    return str(value.get("other", "value"))


def _maker(value: dict[str, Any]) -> str | None:
    """Python that draws a fresh value like ``value`` (``probe.describe``), or None."""
    if "value" in value:
        return str(value["value"])
    for sequence, opening, closing in (("tuple", "(", ",)"), ("list", "[", "]")):
        if sequence in value:
            made = [_maker(item) for item in value[sequence]]
            if any(item is None for item in made):
                return None
            return opening + ", ".join(str(item) for item in made) + closing
    if "tensor" not in value:
        return None
    shape = tuple(value["tensor"])
    dtype = f"torch.{value['dtype']}"
    if value["dtype"] == "bool":
        density = float(value.get("density", 0.5))
        return f"torch.rand({shape}) < {density!r}"
    if "low" in value:  # integers: their observed range, both ends included
        return f"torch.randint({value['low']}, {value['high'] + 1}, {shape}, dtype={dtype})"
    return f"torch.randn({shape}, dtype={dtype})"


_REGION_TEMPLATE = """{source}


# ---- Written by `maxcode regions`: the region `{name}` ({type}) of {problem},
# {share}% of its forward at scale {scale}. The model's source above is unchanged. The Model below
# is built with that module (get_init_inputs gives it, with the weights the whole model is built
# with, seed 0) and computes exactly what it does; a ModelNew is built with it too and may take
# its weights from it. get_inputs draws fresh inputs of the shapes and dtypes the forward gave.

import torch  # noqa: E402

_WHOLE_MODEL, _WHOLE_INIT_INPUTS = Model, get_init_inputs


def _take_region():
    global Model
    # The whole model is built with its own name bound to it (a `super(Model, self)` in it).
    region_model, Model = Model, _WHOLE_MODEL
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        whole = _WHOLE_MODEL(*_WHOLE_INIT_INPUTS())
    finally:
        torch.random.set_rng_state(state)
        Model = region_model
    return whole.get_submodule({path!r}){span}


class Model(torch.nn.Module):
    def __init__(self, region):
        super().__init__()
        self.region = region

    def forward({parameters}):
        outputs = _flat(self.region({arguments}))
        return outputs[0] if len(outputs) == 1 else outputs


def _flat(value):
    # The region's results as a flat tuple of tensors (the harness compares tensors).
    if isinstance(value, (tuple, list)):
        return tuple(leaf for item in value for leaf in _flat(item))
    return () if value is None else (value,)


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [_take_region()]
"""
