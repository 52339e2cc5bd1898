"""A model with region kernels in place: the candidate file ``maxcode optimize --regions``
judges against the whole model.

``stitched_source`` writes one KernelBench candidate: the model's source (at the scale its
regions were found), then a ``ModelNew`` that builds ``Model`` as it is and swaps each chosen
region (and every module alike to it) for a wrapper around that region's winning ``ModelNew``.
The user's source is not changed. Each winner's source runs as a module of its own, and its
``ModelNew`` is built, as its region's problem builds it, with the module it replaces (here,
this model's, with this model's weights). A call the kernel was never judged
on (other shapes, dtypes or constant arguments than the forward gave the region) goes to the
original module, and the kernel's flat results are put back in the shape the module returned
(``ModuleRun.returns``). Nothing here is trusted: the stitched model is judged like any
candidate, in the sandbox, against the original.
"""

from __future__ import annotations

from dataclasses import dataclass

from maxcode.regions import Region, Regions


@dataclass(frozen=True)
class Winner:
    """A region and the source of the kernel (a ``ModelNew`` for its problem) that replaces it."""

    region: Region
    source: str


def stitched_source(regions: Regions, winners: list[Winner]) -> str:
    """The candidate file for ``regions.problem``: its ``Model`` with ``winners`` in place."""
    entries = []
    for winner in winners:
        module = winner.region.module
        members = [module, *winner.region.alike]
        entries.append(
            {
                "name": winner.region.name,
                "paths": [member.path for member in members],
                "span": list(module.span) if module.span else None,
                "inputs": module.inputs,
                "kwargs": module.kwargs,
                "returns": module.returns,
                "source": winner.source,
            }
        )
    return _STITCHED_TEMPLATE.format(
        source=regions.source.rstrip(),
        problem=regions.problem.name,
        scale=f"{regions.scale:g}",
        names=", ".join(winner.region.name for winner in winners) or "none",
        kernels=repr(entries),
    )


_STITCHED_TEMPLATE = '''{source}


# ---- Written by `maxcode optimize --regions`: {problem} at scale {scale} with the kernels of
# its regions ({names}) in place of those modules. Model above is unchanged; ModelNew builds it,
# then swaps each region for its kernel. A call the kernel was not judged on (other shapes,
# dtypes or constant arguments) runs the original module.

import ast as _ast  # noqa: E402
import copy as _copy  # noqa: E402
import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

import torch as _torch  # noqa: E402

_KERNELS = {kernels}


def _flat(value):
    if isinstance(value, (tuple, list)):
        return tuple(leaf for item in value for leaf in _flat(item))
    return () if value is None else (value,)


def _rebuild(shape, leaves):
    if "tensor" in shape:
        return next(leaves)
    if "tuple" in shape:
        return tuple(_rebuild(item, leaves) for item in shape["tuple"])
    if "list" in shape:
        return [_rebuild(item, leaves) for item in shape["list"]]
    if "value" in shape:
        return _ast.literal_eval(shape["value"])
    return next(leaves)


def _fits(described, value):
    if "tensor" in described:
        return (
            isinstance(value, _torch.Tensor)
            and list(value.shape) == described["tensor"]
            and str(value.dtype).removeprefix("torch.") == described["dtype"]
        )
    if "value" in described:
        return repr(value) == described["value"]
    for sequence in ("tuple", "list"):
        if sequence in described:
            return (
                isinstance(value, (tuple, list))
                and len(value) == len(described[sequence])
                and all(_fits(item, part) for item, part in zip(described[sequence], value))
            )
    return False


class _Kernel(_torch.nn.Module):
    """One region's kernel in place of ``original``, for the calls it was judged on."""

    def __init__(self, original, make, entry):
        super().__init__()
        self.original = original
        self.kernel = make(original)
        self.inputs, self.keywords = entry["inputs"], entry["kwargs"]
        self.returns = entry["returns"]

    def __getattr__(self, name):
        # What the model reads of the module it holds (a layer's batch_first) is the original's.
        try:
            return super().__getattr__(name)
        except AttributeError:
            if "original" not in self.__dict__.get("_modules", {{}}):
                raise
            return getattr(self._modules["original"], name)

    def _judged_on(self, args, kwargs):
        if len(args) != len(self.inputs) or set(kwargs) != set(self.keywords):
            return False
        for index, (described, value) in enumerate(zip(self.inputs, args)):
            if "same_as" in described:
                if value is not args[described["same_as"]]:
                    return False
            elif not _fits(described, value):
                return False
        return all(_fits(self.keywords[key], value) for key, value in kwargs.items())

    def forward(self, *args, **kwargs):
        if not self._judged_on(args, kwargs):
            return self.original(*args, **kwargs)
        given = [
            value
            for described, value in zip(self.inputs, args)
            if "value" not in described and "same_as" not in described
        ]
        return _rebuild(self.returns, iter(_flat(self.kernel(*given))))


def _maker(source, name, index):
    # A module of its own, importable by name (torch.compile looks its globals up there).
    module = _types.ModuleType(f"maxcode_region_kernel_{{index}}")
    _sys.modules[module.__name__] = module
    exec(compile(source, f"<kernel of region {{name}}>", "exec"), module.__dict__)
    # Built as its region's problem builds it: with the module it replaces (here, this model's).
    return module.__dict__["ModelNew"]


def _place(model, path, module):
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent), name, module)


class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._whole = None
        state = _torch.random.get_rng_state()
        try:
            for index, entry in enumerate(_KERNELS):
                make = _maker(entry["source"], entry["name"], index)
                for path in entry["paths"]:
                    self._swap(path, entry, make)
        finally:
            _torch.random.set_rng_state(state)

    def _swap(self, path, entry, make):
        if entry["span"] is not None:
            start, stop = entry["span"]
            container = self.get_submodule(path)
            container[start] = _Kernel(container[start:stop], make, entry)
            for index in range(start + 1, stop):
                container[index] = _torch.nn.Identity()
        elif path:
            _place(self, path, _Kernel(self.get_submodule(path), make, entry))
        else:  # the whole model is the region: a copy of it, as built, is the original
            self._whole = _Kernel(_copy.deepcopy(self), make, entry)

    def forward(self, *args, **kwargs):
        if self._whole is not None:
            return self._whole(*args, **kwargs)
        return super().forward(*args, **kwargs)
'''
