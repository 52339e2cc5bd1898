"""Scaling a KernelBench problem down to a CPU's size without changing the problem.

``--scale S`` multiplies the *sizes* of a problem (batch, features, channels, spatial extents,
sequence lengths) and keeps its *hyper-parameters* (kernel sizes, strides, paddings,
dilations, output paddings, groups, head counts, axes, eps, pool sizes, factors). The problem
file is read, never run: the rules look at names and at how a constant is used, and the
result is a rewritten source text that the sandboxed worker loads instead of the original.

What is a size, and what is kept (first rule that applies):

1. a comment overrides: ``# maxcode: keep NAME[, NAME]`` or ``# maxcode: scale NAME`` anywhere
   in the file, or a trailing ``# maxcode: keep`` / ``# maxcode: scale`` on the assignment;
2. how the constant is used: passed (directly, through ``get_init_inputs()`` to a parameter of
   ``Model.__init__``, or through ``self.attr``) as ``kernel_size=``, ``stride=``, ``dim=``...,
   or at a hyper-parameter position of a known layer or function (``nn.Conv2d``'s third
   argument, ``nn.GroupNorm``'s first, ``torch.sum``'s second, ``x.softmax``'s first...);
3. its name (or the parameter's): ``kernel``, ``stride``, ``pad``, ``dilation``, ``groups``,
   ``heads``, ``eps``, ``pool``, ``factor``, ``scale``, ``divisor``, ``min``/``max``... as a
   word of the name; ``dim``/``axis`` names with values up to 8 (``dim = 393216`` is a size);
4. its value is also written as a literal in the model's classes (``nn.Conv2d(3, 96, ...)``
   ties an input's 3 channels to the model): kept;
5. anything else that is an integer is a size.

Sizes are divided by the power of two nearest ``1 / S`` (8 for 0.1, 4 for 0.25), exactly where
they are multiples of it (KernelBench's sizes are powers of two, so their ratios survive:
a width that must equal twice another size still does), rounded otherwise. Sizes up to
``MIN_SIZE`` are left as they are (small channel counts and axes never move), and no size goes
below it (a convolution or a pool still has an input at least that wide) -- except in a
problem with a ``nn.LayerNorm`` over a scaled shape, which must equal the input's trailing
extents exactly, where the floor would break the ratio. A scaled size is then rounded up to a
multiple of every kept group or head count that divided it (a channel count stays divisible
by ``num_groups``, an embedding by ``num_heads``) and of every smaller size that divided it
(depthwise channel multipliers, reshapes by a size), never above its old value. Equal values
scale to equal values, so an ``in_features`` that equals another layer's ``out_features``
still does. Sizes are scaled where
they are written as integers: a module constant (``N = 2048 * 2`` included), an element of a
tuple (``input_shape = (128, 4096)``, ``depth, height, width = 16, 32, 32``), an argument of a
tensor factory in ``get_inputs()`` (``torch.rand(batch_size, 3, 224, 224)``), an element of
``get_init_inputs()``'s list; expressions of names (``bias_shape = (out_channels, 1, 1)``) are
evaluated from the scaled names, so they follow.

What it cannot tell: a size fixed by the model's arithmetic rather than written as a literal
(a ``nn.Linear(16 * 5 * 5, 120)`` that needs a 32x32 image), a relation between sizes that is
not divisibility (``height`` must be at least some multiple of a kernel for a deep stack of
pools), sizes hidden in strings or computed at run time. Such a problem fails its check run
with a message naming the scaled constants; ``# maxcode: keep NAME`` then keeps them.
"""

from __future__ import annotations

import ast
import io
import math
import re
import tokenize
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from maxcode.errors import TaskError
from maxcode.pyast import parse

MIN_SIZE = 8
"""Sizes up to this are never changed, larger ones never scaled below it (a convolution or a
pool still has an input at least this wide; axes and small channel counts stay)."""

_HYPER_WORDS = frozenset(
    [
        "kernel",
        "kernels",
        "stride",
        "strides",
        "pad",
        "padding",
        "paddings",
        "dilation",
        "dilations",
        "groups",
        "group",
        "heads",
        "eps",
        "epsilon",
        "momentum",
        "axis",
        "axes",
        "slope",
        "factor",
        "scale",
        "scaling",
        "divisor",
        "divide",
        "multiplier",
        "dropout",
        "p",
        "margin",
        "threshold",
        "alpha",
        "beta",
        "gamma",
        "temperature",
        "min",
        "max",
        "clamp",
        "value",
        "values",
        "pool",
        "pooling",
        "window",
        "patch",
        "layers",
        "reduction",
        "order",
        "diagonal",
        "topk",
        "upscale",
    ]
)
"""A constant whose name (split at ``_`` and digits) holds one of these words is kept."""
_AXIS_WORDS = frozenset({"dim", "dims", "axis", "axes"})
_AXIS_LIMIT = 8
"""A ``dim``/``axis`` name with a value up to this is an axis; a larger value is a size."""
_DIVIDES_WORDS = frozenset({"groups", "group", "heads"})
"""Kept constants whose name holds one of these divide sizes (channels by groups)."""

_HYPER_KEYWORDS = frozenset(
    {
        "kernel_size",
        "stride",
        "padding",
        "dilation",
        "groups",
        "output_padding",
        "dim",
        "dims",
        "axis",
        "start_dim",
        "end_dim",
        "eps",
        "momentum",
        "num_heads",
        "num_groups",
        "p",
        "negative_slope",
        "scale_factor",
        "upscale_factor",
        "downscale_factor",
        "output_size",
        "min",
        "max",
        "min_val",
        "max_val",
        "beta",
        "threshold",
        "margin",
        "num_layers",
        "diagonal",
        "k",
        "kernel",
        "ceil_mode",
        "norm_type",
    }
)
_DIVIDES_KEYWORDS = frozenset({"groups", "num_groups", "num_heads"})

_H, _G = "h", "g"
"""Roles of a positional argument: a hyper-parameter, a hyper-parameter that divides sizes."""
_CONV = (None, None, _H, _H, _H, _H, _G)
_CONV_T = (None, None, _H, _H, _H, _H, _G, None, _H)
_POOL = (_H, _H, _H, _H)
_AXIS_SECOND = (None, _H, _H)
_POSITIONAL: dict[str, tuple[str | None, ...]] = {
    **{f"Conv{n}d": _CONV for n in (1, 2, 3)},
    **{f"ConvTranspose{n}d": _CONV_T for n in (1, 2, 3)},
    **{f"{kind}Pool{n}d": _POOL for kind in ("Max", "Avg") for n in (1, 2, 3)},
    **{f"Adaptive{kind}Pool{n}d": (_H,) for kind in ("Max", "Avg") for n in (1, 2, 3)},
    **{f"LPPool{n}d": (_H, _H, _H) for n in (1, 2, 3)},
    **{f"BatchNorm{n}d": (None, _H, _H) for n in (1, 2, 3)},
    **{f"InstanceNorm{n}d": (None, _H, _H) for n in (1, 2, 3)},
    "GroupNorm": (_G, None, _H),
    "LayerNorm": (None, _H),
    "RMSNorm": (None, _H),
    "MultiheadAttention": (None, _G, _H),
    "TransformerEncoderLayer": (None, _G),
    "TransformerDecoderLayer": (None, _G),
    "LSTM": (None, None, _H),
    "GRU": (None, None, _H),
    "RNN": (None, None, _H),
    "Softmax": (_H,),
    "LogSoftmax": (_H,),
    "Softmin": (_H,),
    "Flatten": (_H, _H),
    "Unflatten": (_H,),
    "PixelShuffle": (_H,),
    "PixelUnshuffle": (_H,),
    "Dropout": (_H,),
    "LeakyReLU": (_H,),
    "ELU": (_H,),
    "Hardtanh": (_H, _H),
    "Threshold": (_H, _H),
    "CosineSimilarity": (_H, _H),
    "TripletMarginLoss": (_H, _H),
    "Upsample": (_H, _H),
    "conv1d": (None, None, None, _H, _H, _H, _G),
    "conv2d": (None, None, None, _H, _H, _H, _G),
    "conv3d": (None, None, None, _H, _H, _H, _G),
    "max_pool1d": (None, _H, _H, _H, _H),
    "max_pool2d": (None, _H, _H, _H, _H),
    "max_pool3d": (None, _H, _H, _H, _H),
    "avg_pool1d": (None, _H, _H, _H),
    "avg_pool2d": (None, _H, _H, _H),
    "avg_pool3d": (None, _H, _H, _H),
    "group_norm": (None, _G),
    "pad": (None, _H),
    "unfold": (None, _H, _H, _H, _H),
    "flatten": (None, _H, _H),
    "cat": (None, _H),
    "stack": (None, _H),
    "split": (None, _H, _H),
    "chunk": (None, _H, _H),
    "topk": (None, _H, _H),
    "transpose": (None, _H, _H),
    "clamp": (None, _H, _H),
    "clip": (None, _H, _H),
    "hardtanh": (None, _H, _H),
    "leaky_relu": (None, _H),
    "triu": (None, _H),
    "tril": (None, _H),
    "roll": (None, _H, _H),
    "narrow": (None, _H),
    "select": (None, _H),
    "unsqueeze": (None, _H),
    "squeeze": (None, _H),
    "gather": (None, _H),
    "scatter": (None, _H),
    "index_select": (None, _H),
}
"""Positional roles of well-known callables (``torch.X(input, ...)`` and ``nn.X(...)``)."""
for _reduction in [
    "sum",
    "mean",
    "prod",
    "max",
    "min",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "softmax",
    "log_softmax",
    "softmin",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "logsumexp",
    "logcumsumexp",
    "std",
    "var",
    "norm",
    "median",
    "mode",
    "all",
    "any",
    "nansum",
    "nanmean",
    "flip",
]:
    _POSITIONAL[_reduction] = _AXIS_SECOND
_METHOD_AXIS = frozenset(
    [
        "sum",
        "mean",
        "prod",
        "max",
        "min",
        "amax",
        "amin",
        "argmax",
        "argmin",
        "softmax",
        "log_softmax",
        "cumsum",
        "cumprod",
        "logsumexp",
        "std",
        "var",
        "norm",
        "median",
        "all",
        "any",
        "flip",
        "unsqueeze",
        "squeeze",
        "size",
        "transpose",
        "flatten",
        "narrow",
        "select",
        "cat",
    ]
)
"""``x.sum(1)``: the first argument of these tensor methods is an axis."""
_BUILTINS = frozenset({"max", "min", "sum", "pow", "abs", "round", "all", "any"})
"""Python's own functions of these names take no axis."""
_FACTORIES = frozenset(["rand", "randn", "zeros", "ones", "empty", "randperm", "full", "rand_like"])
"""Tensor factories whose integer arguments (or ``size``) in ``get_inputs()`` are sizes."""

_OVERRIDE = re.compile(r"#\s*maxcode:\s*(keep|scale)\b\s*([\w\s,]*)")


@dataclass(frozen=True)
class Scaling:
    """A problem scaled down: the rewritten source and what changed."""

    scale: float
    """The factor asked for."""
    source: str
    """The problem's source with its sizes scaled (what the worker runs)."""
    changed: dict[str, str] = field(default_factory=dict)
    """What was scaled, by where it is written (``batch_size``, ``get_inputs()``):
    ``old->new``."""
    kept: dict[str, str] = field(default_factory=dict)
    """Integer constants above ``MIN_SIZE`` that were kept, with the reason."""
    overrides: dict[str, int] = field(default_factory=dict)
    """The scaled value of each plain integer module constant (for a candidate module's
    copies of the constants, and to key per-shape caches)."""

    def note(self, limit: int = 12) -> str:
        """One line for a description, a report or an error: what was scaled and kept."""
        changed = [f"{name} {value}" for name, value in self.changed.items()]
        text = f"shapes at scale {self.scale:g}: " + (
            _clip(changed, limit) if changed else "nothing to scale"
        )
        if self.kept:
            text += "; kept " + _clip([f"{name} ({why})" for name, why in self.kept.items()], limit)
        return text


def scale_problem(source: str, scale: float) -> Scaling:
    """Scale the sizes of a KernelBench problem's source by ``scale`` (``0 < scale <= 1``)."""
    if not 0 < scale <= 1:
        raise TaskError(f"the shape scale must be in (0, 1], not {scale}")
    tree = parse(source)
    forced = _comment_overrides(source, tree)
    usage = _Usage(tree)
    constants = _module_constants(tree)
    unknown = sorted(set(forced) - {name for name, _ in constants})
    if unknown:
        raise TaskError(
            f"'# maxcode: {forced[unknown[0]]} {unknown[0]}': the problem has no integer "
            f"constant {unknown[0]}"
        )
    model_literals = usage.model_literals
    kept: dict[str, str] = {}
    sizes: list[tuple[str, ast.expr, int]] = []
    divisors: set[int] = set(usage.divisor_literals)
    kept_nodes: set[int] = set()
    reasons: list[tuple[str, ast.expr, str | None]] = []
    for name, node in constants:
        largest = max((value for _, value in _int_leaves(node)), default=0)
        why = _keep_reason(name, largest, forced.get(name), usage, model_literals)
        reasons.append((name, node, why))
        if why is not None:
            # ``a = b = 8``: one literal for both names; keeping either keeps it.
            kept_nodes.add(id(node))
    for name, node, why in reasons:
        ints = list(_int_leaves(node))
        if id(node) not in kept_nodes:
            sizes.extend((name, leaf, value) for leaf, value in ints)
            continue
        if why is not None and max((value for _, value in ints), default=0) > MIN_SIZE:
            kept[name] = why
        if why is not None and _divides(name, usage):
            divisors.update(value for _, value in ints if value >= 2)
    for where, role, node in usage.input_literals():
        value = _int_value(node)
        if value is None or value <= MIN_SIZE:
            continue
        if role == "size" and value not in model_literals:
            sizes.append((where, node, value))
        elif role != "size" or value in model_literals:
            kept[f"{where} {value}"] = role if role != "size" else "written in the model"
    exact = _exact_shapes(tree, usage) & {where for where, _, _ in sizes}
    scaled_values = _scaled_values({value for _, _, value in sizes}, scale, divisors, bool(exact))
    edits: dict[int, tuple[ast.expr, int]] = {}
    changed: dict[str, list[str]] = {}
    for where, node, value in sizes:
        new = scaled_values[value]
        if new != value:
            edits[id(node)] = (node, new)
            changed.setdefault(where, []).append(f"{value}->{new}")
    overrides = {
        name: scaled_values.get(value, value)
        for name, node in constants
        if (value := _int_value(node)) is not None and name not in kept
    }
    return Scaling(
        scale=scale,
        source=_rewrite(source, list(edits.values())),
        changed={where: ", ".join(values) for where, values in changed.items()},
        kept=kept,
        overrides={name: value for name, value in overrides.items() if name in changed},
    )


def _keep_reason(
    name: str, value: int, forced: str | None, usage: _Usage, model_literals: set[int]
) -> str | None:
    if forced == "scale":
        return None
    if forced == "keep":
        return "# maxcode: keep"
    used = usage.hyper_use(name)
    if used:
        return f"used as {used}"
    word = _hyper_name(name, value)
    if word:
        return f"a {word}"
    for parameter in usage.parameters_of(name):
        word = _hyper_name(parameter, value)
        if word:
            return f"a {word}"
    if value > MIN_SIZE and value in model_literals:
        return "written in the model"
    return None


def _hyper_name(name: str, value: int) -> str | None:
    words = [word for word in re.split(r"[_\d]+", name.lower()) if word]
    for word in words:
        if word in _HYPER_WORDS:
            return word
    if words and words[-1] in _AXIS_WORDS and value <= _AXIS_LIMIT:
        return "axis"
    return None


def _exact_shapes(tree: ast.Module, usage: _Usage) -> set[str]:
    """Module names that end up in a shape the input's extents must equal exactly (a
    ``nn.LayerNorm(out_channels)`` applied where the last extent happens to equal it)."""
    values: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = statement.value
    found = {name for name in values if usage.aliases.get(name, {name}) & usage.exact}
    for name in list(found):
        found.update(node.id for node in ast.walk(values[name]) if isinstance(node, ast.Name))
    return found


def _divides(name: str, usage: _Usage) -> bool:
    names = [name, *usage.parameters_of(name)]
    words = {word for each in names for word in re.split(r"[_\d]+", each.lower())}
    return bool(words & _DIVIDES_WORDS) or usage.divides(name)


def _scaled_values(
    values: set[int], scale: float, divisors: set[int], exact: bool = False
) -> dict[int, int]:
    """Each size's scaled value. Sizes are divided by the power of two nearest ``1 / scale``
    (exactly, where they are multiples of it), which keeps the sizes' ratios: a layer whose
    width must equal twice another size still finds it. Not below ``MIN_SIZE`` unless
    ``exact`` (a floor would break the ratios that an exact shape relies on). Then each is
    rounded up to keep the divisors (groups, heads, smaller sizes) that divided it, never above
    its old value."""
    divide = 2 ** max(0, round(math.log2(1 / scale)))
    scaled: dict[int, int] = {}
    for value in sorted(values):
        if value <= MIN_SIZE or divide == 1:
            scaled[value] = value
            continue
        new = value // divide if value % divide == 0 else max(1, round(value / divide))
        new = new if exact else max(MIN_SIZE, new)
        step = 1
        for divisor in sorted(divisors):
            if value % divisor == 0:
                step = math.lcm(step, divisor)
        new = _round_up(new, step)
        for smaller, smaller_new in scaled.items():
            if smaller >= 2 and value % smaller == 0 and smaller_new > 1:
                widened = _round_up(new, math.lcm(step, smaller_new))
                if widened <= value:
                    step, new = math.lcm(step, smaller_new), widened
        scaled[value] = min(new, value)
    return scaled


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


class _Usage:
    """How the names of a problem are used: which reach a hyper-parameter position."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases: dict[str, set[str]] = {}
        """A module constant's other names: ``Model.__init__``'s parameter, ``self.attr``."""
        self.hyper: dict[str, str] = {}
        """Names (constants, parameters, ``self.attr``) at a hyper-parameter position."""
        self.divisor_names: set[str] = set()
        self.exact: set[str] = set()
        """Names in a ``LayerNorm``'s normalized shape: the input's trailing extents."""
        self.divisor_literals: set[int] = set()
        self.model_literals: set[int] = set()
        self._init_parameters: list[str] = []
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        self.get_inputs = functions.get("get_inputs")
        self.get_init_inputs = functions.get("get_init_inputs")
        init = self._link_init_inputs()
        inside_init = {id(node) for node in ast.walk(init)} if init is not None else set()
        parameters = set(self._init_parameters)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                self._note_call(node, parameters if id(node) in inside_init else set())
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                for inner in ast.walk(node):
                    value = _int_value(inner) if isinstance(inner, ast.Constant) else None
                    if value is not None:
                        self.model_literals.add(value)

    def _link_init_inputs(self) -> ast.FunctionDef | None:
        """Links a module constant to the ``Model.__init__`` parameter that receives it
        (through ``get_init_inputs()``'s list) and that parameter to ``self.attr``; returns
        ``__init__``. A parameter is keyed ``arg:NAME``, apart from a module constant of the
        same name: ``dim = 393216`` (a size in ``get_inputs``) is not the ``dim`` of
        ``__init__(self, dim=1)`` when ``get_init_inputs()`` passes nothing."""
        model = next(
            (
                node
                for node in self.tree.body
                if isinstance(node, ast.ClassDef) and node.name == "Model"
            ),
            None,
        )
        init = None
        if model is not None:
            init = next(
                (
                    item
                    for item in model.body
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__"
                ),
                None,
            )
        if init is not None:
            self._init_parameters = [argument.arg for argument in init.args.args[1:]]
            for node in ast.walk(init):
                # self.attr = parameter
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in self._init_parameters
                ):
                    for target in node.targets:
                        if isinstance(target, ast.Attribute):
                            self._alias(_ARG + node.value.id, f"self.{target.attr}")
        for position, element in enumerate(self._init_elements()):
            if isinstance(element, ast.Name) and position < len(self._init_parameters):
                self._alias(element.id, _ARG + self._init_parameters[position])
        return init

    def _init_elements(self) -> list[ast.expr]:
        if self.get_init_inputs is None:
            return []
        for node in ast.walk(self.get_init_inputs):
            if isinstance(node, ast.Return) and isinstance(node.value, (ast.List, ast.Tuple)):
                return list(node.value.elts)
        return []

    def _alias(self, name: str, other: str) -> None:
        group = self.aliases.get(name, {name}) | self.aliases.get(other, {other})
        for member in group:
            self.aliases[member] = group

    def _note_call(self, call: ast.Call, local: set[str]) -> None:
        """``local``: the names that are ``Model.__init__``'s parameters where ``call`` is."""
        callee = call.func
        name = (
            callee.attr
            if isinstance(callee, ast.Attribute)
            else callee.id
            if isinstance(callee, ast.Name)
            else ""
        )
        if name == "LayerNorm":
            shapes = call.args[:1] + [k.value for k in call.keywords if k.arg == "normalized_shape"]
            for shape in shapes:
                self.exact.update(key for node in ast.walk(shape) if (key := _symbol(node, local)))
        for keyword in call.keywords:
            if keyword.arg in _HYPER_KEYWORDS:
                self._mark(
                    keyword.value, f"{keyword.arg}=", keyword.arg in _DIVIDES_KEYWORDS, local
                )
        roles = _POSITIONAL.get(name, ())
        if isinstance(callee, ast.Name) and name in _BUILTINS:
            roles = ()
        is_method = (
            isinstance(callee, ast.Attribute)
            and not _is_module_path(callee.value)
            and name in _METHOD_AXIS
        )
        if is_method:
            roles = (_H, _H, _H)
        for position, argument in enumerate(call.args[: len(roles)]):
            role = roles[position]
            if role is not None and not isinstance(argument, ast.Starred):
                what = f"argument {position + 1} of {name}()"
                self._mark(argument, what, role == _G, local)

    def _mark(self, value: ast.expr, why: str, divides: bool, local: set[str]) -> None:
        for node in ast.walk(value):
            key = _symbol(node, local)
            if key is not None:
                self.hyper.setdefault(key, why)
                if divides:
                    self.divisor_names.add(key)
            elif divides and isinstance(node, ast.Constant):
                literal = _int_value(node)
                if literal is not None and literal >= 2:
                    self.divisor_literals.add(literal)

    def parameters_of(self, name: str) -> list[str]:
        return [
            other.removeprefix(_ARG)
            for other in sorted(self.aliases.get(name, ()))
            if other.startswith(_ARG)
        ]

    def hyper_use(self, name: str) -> str | None:
        for other in sorted(self.aliases.get(name, {name})):
            if other in self.hyper:
                return self.hyper[other]
        return None

    def divides(self, name: str) -> bool:
        return bool(self.aliases.get(name, {name}) & self.divisor_names)

    def input_literals(self) -> Iterator[tuple[str, str, ast.expr]]:
        """Integers written in ``get_init_inputs()``'s list (with the parameter's role) and in
        the size arguments of tensor factories in ``get_inputs()``."""
        for position, element in enumerate(self._init_elements()):
            if _int_value(element) is None:
                continue
            parameter = (
                self._init_parameters[position] if position < len(self._init_parameters) else ""
            )
            use = self.hyper_use(_ARG + parameter) or _hyper_name(
                parameter, _int_value(element) or 0
            )
            yield "get_init_inputs()", use or "size", element
        if self.get_inputs is None:
            return
        for node in ast.walk(self.get_inputs):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func
            name = callee.attr if isinstance(callee, ast.Attribute) else ""
            if name not in _FACTORIES and name != "randint":
                continue
            arguments: list[ast.expr] = list(node.args)
            if name == "randint":
                arguments = [node.args[-1]] if len(node.args) >= 2 else []
            arguments += [keyword.value for keyword in node.keywords if keyword.arg == "size"]
            if name == "full":
                arguments = arguments[:1]
            for argument in arguments:
                elements: list[ast.expr] = (
                    list(argument.elts) if isinstance(argument, ast.Tuple) else [argument]
                )
                for element in elements:
                    if _int_value(element) is not None:
                        yield "get_inputs()", "size", element


def _is_module_path(node: ast.expr) -> bool:
    """``torch``, ``nn``, ``F``, ``torch.nn.functional``: a module, not a tensor."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in {"torch", "nn", "F", "functional", "math"}


_ARG = "arg:"
"""Key prefix of a ``Model.__init__`` parameter (see ``_Usage._link_init_inputs``)."""


def _symbol(node: ast.AST, local: Collection[str] = ()) -> str | None:
    if isinstance(node, ast.Name):
        return _ARG + node.id if node.id in local else node.id
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    ):
        return f"self.{node.attr}"
    return None


def _module_constants(tree: ast.Module) -> list[tuple[str, ast.expr]]:
    """Module-level names bound to integers or tuples of integers (``a = b = 8``,
    ``d, h, w = 16, 32, 32``, ``N = 2048 * 2``, ``shape = (128, 4096)``), in order."""
    found: list[tuple[str, ast.expr]] = []
    for statement in tree.body:
        targets: list[ast.expr]
        if isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        elif isinstance(statement, ast.Assign):
            targets, value = list(statement.targets), statement.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and _has_ints(value):
                found.append((target.id, value))
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                for part, element in zip(target.elts, value.elts):
                    if isinstance(part, ast.Name) and _has_ints(element):
                        found.append((part.id, element))
    return found


def _has_ints(node: ast.expr) -> bool:
    return any(True for _ in _int_leaves(node))


def _int_leaves(node: ast.expr) -> Iterator[tuple[ast.expr, int]]:
    """The integers written in a constant's value: the value itself, or the elements of a
    tuple or list; expressions of names are not (they follow the names)."""
    value = _int_value(node)
    if value is not None:
        yield node, value
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _int_leaves(element)


def _int_value(node: ast.AST) -> int | None:
    """The value of an integer literal or an expression of integer literals (``2048 * 2``)."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)
    ):
        left, right = _int_value(node.left), _int_value(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and right > 64):
            return None
        if isinstance(node.op, ast.FloorDiv):
            return left // right if right else None
        operations = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
        return operations.get(type(node.op), left**right)
    return None


def _comment_overrides(source: str, tree: ast.Module) -> dict[str, str]:
    """Names forced to ``keep`` or ``scale`` by ``# maxcode:`` comments."""
    forced: dict[str, str] = {}
    lines_targets: dict[int, list[str]] = {}
    for name, node in _module_constants(tree):
        lines_targets.setdefault(node.lineno, []).append(name)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return forced
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = _OVERRIDE.match(token.string)
        if match is None:
            continue
        action, listed = match.group(1), match.group(2)
        names = [name for name in re.split(r"[\s,]+", listed) if name]
        if not names:
            names = lines_targets.get(token.start[0], [])
            if not names:
                raise TaskError(
                    f"line {token.start[0]}: '# maxcode: {action}' names no constant "
                    f"(write it after an assignment, or name the constants)"
                )
        for name in names:
            forced[name] = action
    return forced


def _rewrite(source: str, edits: list[tuple[ast.expr, int]]) -> str:
    """The source with each edited node's text replaced by its new value."""
    lines = source.splitlines(keepends=True)
    encoded = [line.encode("utf-8") for line in lines]
    spans = sorted(
        (
            (
                node.lineno,
                node.col_offset,
                node.end_lineno or node.lineno,
                node.end_col_offset or 0,
            ),
            new,
        )
        for node, new in edits
    )
    for (line, start, end_line, end), new in reversed(spans):
        first, last = encoded[line - 1], encoded[end_line - 1]
        encoded[line - 1] = first[:start] + str(new).encode() + last[end:]
        for index in range(line, end_line):
            encoded[index] = b""
    return b"".join(encoded).decode("utf-8")


def _clip(items: list[str], limit: int) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
