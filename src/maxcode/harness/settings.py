"""How candidates are evaluated: one record, stated once.

``maxcode eval``'s options are generated from ``EvalSettings`` as ``optimize``'s are from
``SearchConfig`` (which extends it); an ``EvalJob`` carries one; each task kind checks the
settings it is given (``maxcode.kinds``), and KernelBench's evaluator turns them into its own
``KernelBenchSettings`` in one place."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from maxcode.errors import MaxcodeError
from maxcode.harness.sandbox import IsolationChoice

Device = Literal["auto", "cpu", "cuda"]
Backend = Literal["cuda", "triton"]


def only_for(*kinds: str, hint: str = "") -> dict[str, Any]:
    """A field's mark: the setting is for tasks of ``kinds`` only; on another kind's task it is
    refused in one line, with ``hint`` after it (``Kind.prepare``)."""
    return {"only_for": list(kinds), "hint": hint}


def kind_only(field: Any) -> tuple[list[str], str] | None:
    """The kinds a setting is for and the refusal's hint; None for a setting of every kind."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "only_for" in extra:
        return list(extra["only_for"]), str(extra.get("hint", ""))
    return None


class EvalSettings(BaseModel):
    """What decides how a candidate is built, checked and timed (the task aside)."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="forbid")

    metric: Literal["wall", "instructions", "printed"] = "wall"
    """The cost the speedup is measured in: wall time, callgrind's instruction count
    (deterministic), or (projects) the cost a project's bench prints. A project task's own
    bench_metric wins over wall."""
    repeats: int | None = Field(default=None, ge=1)
    """C++: the least number of timed rounds (more until the interval is narrow); projects:
    the bench's timed rounds (the task's repeats when unset); KernelBench: exactly this many
    timed calls per side; None: adaptive."""
    device: Device = "auto"
    """Where KernelBench candidates run: auto is cuda when PyTorch sees a GPU, else cpu (C++
    and project tasks: cpu); a run records the device it resolved to."""
    backend: Backend | None = Field(default=None, json_schema_extra=only_for("kernelbench"))
    """KernelBench: the kernel language candidates are written in (cuda or triton); unset: cuda
    on a GPU, C++ extensions on a CPU. Triton on a CPU is checked in Triton's interpreter and
    timed only on a GPU (no reward there)."""
    scale: float = Field(
        default=1.0,
        gt=0,
        le=1,
        json_schema_extra=only_for("kernelbench", hint=" (it scales a problem's sizes)"),
    )
    """KernelBench: factor for the problem's sizes, hyper-parameters kept (smaller shapes for a
    CPU)."""
    compile_baseline: bool = False
    """KernelBench: also time the reference under ``torch.compile``."""
    tolerance: float | None = Field(default=None, gt=0)
    """KernelBench: atol = rtol for floating outputs; None for the per-dtype defaults."""
    check_scale: float | None = Field(
        default=None, gt=0, le=1, json_schema_extra=only_for("kernelbench")
    )
    """KernelBench: also check each correct candidate at the problem's sizes times this (other
    shapes, untimed); a candidate wrong there gets a ``shapes`` warning, shown to the critic."""
    profile: bool | None = None
    """Add where the time goes (C++: hot source lines and cache misses under callgrind;
    KernelBench: the top operators of a forward); None: off for one evaluation, and in a search
    on when an LLM critic reads them."""
    pie_tests: str | None = None
    """Test-case folder of a PIE row."""
    isolation: IsolationChoice = "auto"
    """Sandbox for candidates: auto picks the strongest available (bwrap, then unshare);
    rlimits is refused without unsafe_isolation. A run stores the level it resolved to."""
    unsafe_isolation: bool = False
    """Accept an isolation level that cannot keep expected outputs private and runs stateless
    (rlimits); without it such a level is refused. Recorded with the run and every result."""

    def kernel_backend(self) -> str:
        """The backend in effect: ``backend``, else ``cuda`` on a GPU, ``cpp`` on a CPU."""
        return kernel_backend(self.backend, self.device)


EVAL_PRECISION = 0.02
"""``maxcode eval``'s precision by default: +-2%, what a search's screen gets. The number comes
with its interval, so a user sees how far it may be off; +-2% tells a 5% change from noise
(equal programs land within about 1% on an idle machine, ``benchmarks/noise.py``) in a quarter
of the rounds +-1% takes (a search's re-verification keeps +-1%)."""


class EvalRequest(EvalSettings):
    """``maxcode eval``'s settings: one candidate judged and its speedup reported, with what
    only a single evaluation takes (``rounds``, ``compile_only``)."""

    compile_baseline: bool = True
    """KernelBench: also time the reference under ``torch.compile``."""
    rounds: int | None = Field(
        default=None,
        ge=1,
        json_schema_extra=only_for(
            "kernelbench",
            hint=" (the others time fresh processes every round; --repeats sets the least "
            "number of rounds)",
        ),
    )
    """KernelBench: exactly this many timing windows, each with fresh worker processes,
    combined into one speedup; None: 3, and up to 24 until their interval is as narrow as
    ``precision``, or 8 when repeats is set (MAXCODE_MOST_ROUNDS caps both)."""
    compile_only: bool = Field(default=False, json_schema_extra=only_for("kernelbench"))
    """KernelBench: only build the candidate's extensions (with device cuda: nvcc, no GPU
    needed); nothing is run."""
    precision: float | None = Field(
        default=None, gt=0, lt=0.5, json_schema_extra=only_for("cpp", "kernelbench")
    )
    """C++ and KernelBench: timed rounds go on until the speedup's 95% interval is within this
    share of its estimate (a cap reached first leaves it wider, and says so); None: 0.02, +-2%
    (KernelBench: 0.03). Half the width takes about four times
    the rounds, and gets four times the caps."""


def kernel_backend(backend: str | None, device: str) -> str:
    """A KernelBench candidate's kernel language: ``backend`` when set, else ``cuda`` on a GPU
    and C++ extensions (``cpp``) on a CPU."""
    return backend or ("cuda" if device == "cuda" else "cpp")


def with_overrides(model: type[Any], given: EvalSettings | None, overrides: dict[str, Any]) -> Any:
    """A ``model`` (``EvalSettings`` or ``EvalRequest``) of ``given``'s settings (the model's
    defaults when None) with ``overrides`` (setting names as keyword arguments); a bad value or
    an unknown name is a one-line ``MaxcodeError``."""
    base = {} if given is None else given.model_dump(include=set(model.model_fields))
    return validated(model, {**base, **overrides})


def validated(model: type[Any], settings: dict[str, Any]) -> Any:
    """``model`` validated from ``settings``; the first problem as a one-line
    ``MaxcodeError`` that names the setting."""
    try:
        return model.model_validate(settings)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "settings"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise MaxcodeError(f"{where}: {message}") from None
