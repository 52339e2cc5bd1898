"""The interface every task kind implements."""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from maxcode.errors import MaxcodeError

if TYPE_CHECKING:
    from maxcode.harness.sandbox import Sandbox
    from maxcode.harness.settings import EvalSettings
    from maxcode.tasks.model import Task
    from maxcode.types import Feedback


@dataclass(frozen=True)
class Occasion:
    """What one evaluation is for and where it runs, beside the user's settings."""

    sandbox: Sandbox | None = None
    """Where candidates run (None: the strongest level this machine offers)."""
    cpu: int | None = None
    """The CPU timed runs are pinned to (None: one is picked)."""
    reported: bool = False
    """The speedup is reported (``maxcode eval``, re-verification), not a screen of a search's
    candidate: timed to a narrower interval (``evaluate_task``)."""
    rounds: int | None = None
    """KernelBench: exactly this many rounds of fresh workers (None: by ``reported``)."""
    compile_only: bool = False
    """KernelBench: build the candidate's extensions and run nothing."""
    precision: float | None = None
    """C++, KernelBench: the interval to time to, as a share of the estimate (None: by
    ``reported``)."""
    bar: float | None = None
    """A search's screen: the reward below which a candidate cannot be kept; its timing stops
    once its interval lies wholly below (None: time to the full precision)."""


Settings = TypeVar("Settings", bound="EvalSettings")
"""``EvalSettings`` or a record that extends it (``EvalRequest``, ``SearchConfig``)."""


class Kind(ABC):
    """What differs between task kinds: which settings apply, how a candidate is judged, read,
    written and taken from a model's answer, and which prompts describe it."""

    name: ClassVar[str]
    """The kind's name in ``task.kind``, ``task.toml`` and stored runs."""
    title: ClassVar[str]
    """The kind in messages (``C++ tasks run on the CPU``)."""
    language: ClassVar[str]
    """The language of its programs: fenced-block tags of answers, program identity."""
    extension: ClassVar[str]
    """The suffix of a written best program ("" for a folder)."""
    metrics: ClassVar[tuple[str, ...]] = ("wall", "instructions")
    """The costs a speedup can be measured in."""
    eval_precision: ClassVar[float | None] = None
    """``maxcode eval``'s interval by default, as a share of the estimate (None:
    ``settings.EVAL_PRECISION``)."""
    in_folders: ClassVar[bool] = True
    """Whether a task folder's ``task.toml`` may name the kind (``load_folder``)."""
    needs: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = ()
    """What ``maxcode doctor`` checks for this kind: (variant, tools) pairs, a variant being a
    metric or a device, its tools what it needs beside the sandbox (``doctor.probe_tools``'
    names)."""

    def load_folder(self, folder: Path, raw: dict[str, Any], config_path: Path) -> Task:
        """The task of a folder whose ``task.toml`` (read into ``raw``) names this kind (only
        kinds ``in_folders``); a problem with it is a one-line ``TaskError``."""
        raise NotImplementedError(f"{self.name} tasks are not task folders")

    @property
    def templates(self) -> str:
        """The kind whose prompt templates it uses (its own: the ``templates`` folder beside
        its module)."""
        return self.name

    def device(self, requested: str) -> str:
        """The device ``requested`` resolves to (``auto`` included); a device the kind cannot
        use is a ``MaxcodeError``. Kinds other than KernelBench run on the CPU."""
        if requested not in ("auto", "cpu"):
            raise MaxcodeError(f"{self.title} tasks run on the CPU; --device is for KernelBench")
        return "cpu"

    def prepare(self, task_name: str, settings: Settings, **one_off: Any) -> Settings:
        """``settings`` checked against this kind (one line naming the task for a setting it
        cannot take) with the device resolved. ``one_off``: settings of a single evaluation
        (``rounds``, ``compile_only``), checked too when set."""
        from maxcode.harness.settings import EvalRequest, kind_only

        for name, field in EvalRequest.model_fields.items():
            marked = kind_only(field)
            value = one_off.get(name, getattr(settings, name, None))
            if marked is None or self.name in marked[0] or value in (None, False, field.default):
                continue
            owners = " and ".join(kind.title for kind in _kinds() if kind.name in marked[0])
            flag = "--" + name.replace("_", "-")
            raise MaxcodeError(f"{task_name}: {flag} is for {owners} tasks{marked[1]}")
        if settings.metric not in self.metrics:
            raise MaxcodeError(
                f"{task_name}: {self.title} tasks take --metric {' or '.join(self.metrics)}"
            )
        try:
            device = self.device(settings.device)
        except MaxcodeError as error:
            raise MaxcodeError(f"{task_name}: {error}") from None
        return settings.model_copy(update={"device": device})

    def ready(self, settings: EvalSettings) -> None:
        """Raise a one-line error when this machine cannot run the kind's evaluations with
        ``settings`` (a search checks before any LLM call is paid for)."""
        return None

    def device_note(self, device: str) -> str | None:
        """What ``--device auto`` chose, when the choice is worth saying (None: nothing)."""
        return None

    @abstractmethod
    def evaluate(
        self, task: Task, source: str, settings: EvalSettings, occasion: Occasion
    ) -> Feedback:
        """Judge ``source`` against ``task`` (``settings`` prepared by ``prepare``), as
        ``occasion`` says."""

    def prebuild(
        self, task: Task, source: str, settings: EvalSettings, sandbox: Sandbox | None
    ) -> Feedback | None:
        """Build what the candidate compiles apart from its evaluation (every CPU, no timing);
        the verdict when that fails, None when there was nothing to build or it is cached."""
        return None

    def read_candidate(self, task: Task, path: Path) -> str:
        """The candidate ``maxcode eval`` names, as a program's source."""
        return read_candidate_file(path)

    def write_program(self, source: str, path: Path) -> None:
        """Write a program (the best of a run) where ``path`` says; OSError is the caller's."""
        path.write_text(source)

    def extract(self, task: Task, answer: str, parent: str) -> str | None:
        """The program in a model's ``answer`` to a prompt that showed ``parent`` (None: it
        holds none)."""
        from maxcode.kinds.answers import extract_code

        return extract_code(answer, self.language)

    @staticmethod
    def run_arguments(settings: EvalSettings, occasion: Occasion) -> dict[str, Any]:
        """What the C++ and project evaluators take alike: the metric, the repeats, where the
        runs go and whether to profile."""
        return {
            "metric": settings.metric,
            "repeats": settings.repeats,
            "sandbox": occasion.sandbox,
            "cpu": occasion.cpu,
            "profile": bool(settings.profile),
        }

    def critique(self, feedback: Feedback) -> str:
        """The offline critic's diagnosis and suggestions for a correct candidate."""
        heaviest = ""
        if feedback.candidate_costs and feedback.tests:
            position = max(
                range(len(feedback.candidate_costs)), key=feedback.candidate_costs.__getitem__
            )
            share = feedback.candidate_costs[position] / max(sum(feedback.candidate_costs), 1e-12)
            heaviest = f" Test {feedback.tests[position].index} takes {share:.0%} of its time."
        return (
            f"Diagnosis: correct and {feedback.speedup:.2f}x faster than the reference.{heaviest}\n"
            "Suggestions:\n"
            "- Look for a better algorithm or data structure for the hot loop.\n"
            "- Read input and write output in bulk; avoid per-item flushes.\n"
            "- Avoid copies and allocations inside loops; keep data contiguous."
        )


def kind_templates(kind: Kind) -> Path:
    """The ``templates`` folder beside ``kind``'s module (``maxcode/kinds/cpp/templates``)."""
    module = sys.modules[type(kind).__module__]
    return Path(module.__file__ or ".").parent / "templates"


def read_candidate_file(path: Path) -> str:
    """A candidate file's text; missing or unreadable is a one-line ``MaxcodeError``."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MaxcodeError(f"candidate not found: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise MaxcodeError(f"candidate {path} cannot be read: {error}") from None


def _kinds() -> list[Kind]:
    from maxcode.kinds import KINDS

    return list(KINDS.values())
