"""``maxcode doctor``: what this machine offers each task kind, and how to get what is missing.

Every probe is bounded (a few seconds at most) and never raises: a missing or broken tool is a
line of the report, not a traceback. PyTorch is probed in a child interpreter, so a broken
install (or a slow CUDA initialisation) cannot take the command down with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

TORCH_VERSION = "2.13.0"
"""The newest PyTorch maxcode is tested with (``pip install 'maxcode[torch]'``)."""
TRITON_VERSION = "3.9.0"
"""The Triton that goes with it."""
PROBE_TIMEOUT_S = 5.0
TORCH_TIMEOUT_S = 60.0

INSTALL = {
    "bwrap": "apt-get install bubblewrap",
    "g++": "apt-get install g++",
    "valgrind": "apt-get install valgrind",
    "nvcc": "install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads)",
    "ncu": "install Nsight Compute (part of the CUDA toolkit)",
    "torch": f"pip install torch=={TORCH_VERSION}",
    "torch-cuda": f"pip install torch=={TORCH_VERSION} (a CUDA build) and an NVIDIA driver",
    "triton": f"pip install triton=={TRITON_VERSION}",
    "ninja": "pip install ninja",
}


@dataclass
class Tool:
    """One tool or library and what was found of it."""

    name: str
    """The tool (``g++``, ``torch``, ...)."""
    found: bool
    """Present and working."""
    detail: str
    """Its version, path or why it does not work."""
    install: str = ""
    """The command that installs it, when it is missing."""


@dataclass
class IsolationReport:
    """The sandbox level ``auto`` picks here, and why."""

    level: str
    """bwrap, unshare or rlimits."""
    safe: bool
    """The level keeps expected outputs private and runs stateless (else refused without
    ``--unsafe-isolation``)."""
    reasons: list[str]
    """What decided it: bwrap present and working, user namespaces, root."""
    install: str = ""
    """What would give a safe level, when this one is not."""
    blocked: bool = False
    """No level was tried: the temporary folder or ``MAXCODE_HOME`` cannot be written (the
    reason says which)."""


@dataclass
class TaskKindReport:
    """Whether one kind of task can run here."""

    kind: str
    """``cpp wall``, ``cpp instructions``, ``kernelbench cpu``, ``kernelbench cuda``."""
    ready: bool
    """Everything it needs is here."""
    missing: list[str]
    """What is missing, by tool name."""
    install: list[str] = field(default_factory=list)
    """The commands that install what is missing."""


@dataclass
class DoctorReport:
    """What ``maxcode doctor`` prints."""

    isolation: IsolationReport
    tools: list[Tool]
    task_kinds: list[TaskKindReport]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _run(argv: list[str], timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, list[str]]:
    """Run a probe command: (exit 0, its output lines, or one line saying why it failed)."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except subprocess.TimeoutExpired:
        return False, [f"{argv[0]} did not answer within {timeout:.0f} s"]
    except OSError as error:
        return False, [f"{argv[0]} cannot be run: {error.strerror or error}"]
    output = [line for line in (done.stdout or done.stderr).splitlines() if line.strip()]
    return done.returncode == 0, output or [f"exit {done.returncode}"]


def _binary(name: str, version_args: list[str], version_line: int = 0) -> Tool:
    """A command-line tool: found on PATH and answering ``version_args``."""
    path = shutil.which(name)
    if path is None:
        return Tool(name, False, "not found", INSTALL.get(name, ""))
    ok, lines = _run([path, *version_args])
    line = lines[version_line].strip() if ok else lines[0].strip()
    return Tool(name, ok, f"{line} ({path})" if ok else line, "" if ok else INSTALL.get(name, ""))


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken distribution's metadata: report it as missing
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _user_namespaces() -> tuple[bool | None, str]:
    """Whether unprivileged user namespaces are allowed, as the kernel's settings say."""
    clone = _read("/proc/sys/kernel/unprivileged_userns_clone")
    if clone == "0":
        return False, "unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0)"
    limit = _read("/proc/sys/user/max_user_namespaces")
    if limit == "0":
        return False, "user namespaces are off (user.max_user_namespaces=0)"
    apparmor = _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if apparmor == "1":
        return False, (
            "AppArmor restricts unprivileged user namespaces "
            "(kernel.apparmor_restrict_unprivileged_userns=1)"
        )
    if limit is None and clone is None:
        return None, "user namespace settings not readable"
    return True, "unprivileged user namespaces allowed"


def probe_isolation() -> IsolationReport:
    """The level ``auto`` picks on this machine, with the reasons."""
    from maxcode.errors import MaxcodeError
    from maxcode.harness.sandbox import SAFE_LEVELS, _probe, check_scratch
    from maxcode.home import maxcode_home, write_problem

    try:
        check_scratch()
        home = maxcode_home()
        problem = write_problem(home)
        if problem is not None:
            raise MaxcodeError(f"MAXCODE_HOME {problem}; free space there or move it")
    except MaxcodeError as error:
        # Nothing can run until this is fixed, and no sandbox level was tried: say that, not
        # that a sandbox does not start.
        return IsolationReport("untested", False, [str(error)], "", blocked=True)
    reasons: list[str] = []
    root = os.geteuid() == 0
    reasons.append(
        "running as root: each run gets a uid of its own"
        if root
        else "not root: runs keep this user's uid"
    )
    allowed, note = _user_namespaces()
    reasons.append(note)
    level = "rlimits"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        reasons.append("bwrap not found")
    else:
        if _safe_probe(_probe, "bwrap"):
            reasons.append(f"bwrap works ({bwrap})")
            level = "bwrap"
        else:
            reasons.append(f"bwrap found ({bwrap}) but a sandboxed program does not start")
    if level == "rlimits":
        unshare = shutil.which("unshare")
        if unshare is None:
            reasons.append("unshare not found")
        elif _safe_probe(_probe, "unshare"):
            reasons.append(f"unshare works ({unshare})")
            level = "unshare"
        else:
            reasons.append("unshare found but new namespaces cannot be made")
    safe = level in SAFE_LEVELS
    install = ""
    if level != "bwrap":
        install = INSTALL["bwrap"] if bwrap is None else ""
        if allowed is False:
            install = (install + "; " if install else "") + (
                "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1"
                " / kernel.apparmor_restrict_unprivileged_userns=0), or run as root"
            )
    return IsolationReport(level, safe, reasons, install)


def _safe_probe(probe: Any, level: str) -> bool:
    try:
        return bool(probe(level))
    except Exception:
        return False


def _torch_tool() -> tuple[Tool, Tool]:
    """torch (version) and a GPU (torch.cuda), probed in a child interpreter."""
    version = _package_version("torch")
    if version is None:
        return (
            Tool("torch", False, "not installed", INSTALL["torch"]),
            Tool("gpu", False, "unknown: torch not installed", INSTALL["torch-cuda"]),
        )
    script = (
        "import json, torch\n"
        "ok = torch.cuda.is_available()\n"
        "name = torch.cuda.get_device_name(0) if ok else ''\n"
        "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
        " 'gpu': ok, 'name': name}))\n"
    )
    ok, lines = _run([sys.executable, "-c", script], timeout=TORCH_TIMEOUT_S)
    line = lines[-1] if ok else lines[0]
    try:
        found = json.loads(line) if ok else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return (
            Tool("torch", False, f"{version} installed but does not import: {line}", ""),
            Tool("gpu", False, "unknown: torch does not import", INSTALL["torch-cuda"]),
        )
    build = f"CUDA {found['cuda']}" if found.get("cuda") else "CPU build"
    torch = Tool("torch", True, f"{found['version']} ({build})")
    if found.get("gpu"):
        gpu = Tool("gpu", True, str(found.get("name") or "CUDA device"))
    elif found.get("cuda"):
        gpu = Tool("gpu", False, "no CUDA device visible to torch", "an NVIDIA GPU and driver")
    else:
        gpu = Tool("gpu", False, "torch is a CPU build", INSTALL["torch-cuda"])
    return torch, gpu


def _python_package(name: str) -> Tool:
    version = _package_version(name)
    if version is None:
        return Tool(name, False, "not installed", INSTALL.get(name, f"pip install {name}"))
    return Tool(name, True, version)


def probe_tools() -> list[Tool]:
    """The compilers, profilers and libraries the task kinds use."""
    torch, gpu = _torch_tool()
    return [
        _binary("g++", ["--version"]),
        _binary("valgrind", ["--version"]),
        _binary("nvcc", ["--version"], version_line=-1),
        _binary("ncu", ["--version"], version_line=-1),
        torch,
        gpu,
        _python_package("triton"),
        _python_package("ninja"),
    ]


def task_kinds(tools: list[Tool], isolation: IsolationReport) -> list[TaskKindReport]:
    """Whether each task kind can run here (``Kind.needs``: Triton and ncu are optional, a
    backend and a profiler), and what installs what is missing."""
    from maxcode.kinds import KINDS

    by_name = {tool.name: tool for tool in tools}
    reports = []
    wanted = {
        f"{name} {variant}": tools for name, kind in KINDS.items() for variant, tools in kind.needs
    }
    for kind, needs in wanted.items():
        missing = [name for name in needs if not by_name[name].found]
        if not isolation.safe:
            missing.append("writable folders" if isolation.blocked else "isolation")
        install = [by_name[name].install for name in missing if name in by_name]
        if isolation.blocked:
            install.append(isolation.reasons[0])
        elif not isolation.safe:
            install.append(isolation.install or INSTALL["bwrap"])
        install = [line for line in dict.fromkeys(install) if line]
        reports.append(TaskKindReport(kind, not missing, missing, install))
    return reports


def doctor() -> DoctorReport:
    """Probe this machine (a few seconds; PyTorch's import may take longer)."""
    try:
        isolation = probe_isolation()
    except Exception as error:  # the report must come out whatever the sandbox code does
        isolation = IsolationReport("rlimits", False, [f"probe failed: {error}"], INSTALL["bwrap"])
    tools = probe_tools()
    return DoctorReport(isolation, tools, task_kinds(tools, isolation))


def format_report(report: DoctorReport) -> list[str]:
    """The report as lines for a terminal."""
    iso = report.isolation
    verdict = "safe" if iso.safe else "UNSAFE: refused unless --unsafe-isolation"
    lines = [f"isolation: auto picks {iso.level} ({verdict})"]
    if iso.blocked:
        lines = ["isolation: not tried: files cannot be written where maxcode needs them"]
    lines += [f"  - {reason}" for reason in iso.reasons]
    if iso.install:
        lines.append(f"  to fix: {iso.install}")
    lines.append("tools:")
    for tool in report.tools:
        mark = "ok" if tool.found else "missing"
        line = f"  {tool.name:<9} {mark:<8} {tool.detail}"
        if tool.install:
            line += f"  [{tool.install}]"
        lines.append(line)
    lines.append("task kinds:")
    width = max((len(kind.kind) for kind in report.task_kinds), default=0) + 1
    for kind in report.task_kinds:
        if kind.ready:
            lines.append(f"  {kind.kind:<{width}} ready")
        else:
            lines.append(f"  {kind.kind:<{width}} missing {', '.join(kind.missing)}")
            lines += [f"    {command}" for command in kind.install]
    return lines
