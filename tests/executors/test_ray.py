"""The Ray executor on a local Ray instance on loopback with two CPUs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from maxcode.executors import EvalJob, LocalExecutor
from maxcode.harness.settings import EvalSettings
from maxcode.kinds.load import load_task
from maxcode.types import Feedback
from tests.helpers import ECHO_SUM, make_hermetic, write_task

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'maxcode[ray]')")

SLOW = ECHO_SUM.replace("#include <cstdio>", "#include <cstdio>\n#include <unistd.h>").replace(
    "printf(", "usleep(400000);\n    printf("
)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A local Ray instance; its files (and its token) go to a temporary folder. Its workers
    keep the environment they start with: a hermetic one of their own (``make_hermetic``)."""
    with pytest.MonkeyPatch.context() as patch:
        make_hermetic(patch, tmp_path_factory.mktemp("maxcode-home"))
        yield from _ray_instance()


def _ray_instance() -> Iterator[None]:
    home = tempfile.mkdtemp(prefix="ray-home-")
    saved = {name: os.environ.get(name) for name in ("HOME", "RAY_AUTH_MODE")}
    os.environ["HOME"] = home
    os.environ["RAY_AUTH_MODE"] = "disabled"
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=temp,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield
    finally:
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _evaluate(executor: object, jobs: list[EvalJob]) -> list[Feedback]:
    from maxcode.executors import Executor

    assert isinstance(executor, Executor)

    async def run() -> list[Feedback]:
        async with executor:
            return list(await asyncio.gather(*(executor.evaluate(job) for job in jobs)))

    return asyncio.run(run())


def test_same_answers_as_the_local_executor(ray_cluster: None, tmp_path: Path) -> None:
    from maxcode.executors.ray_executor import RayExecutor

    task = load_task(str(write_task(tmp_path / "t")))
    wrong = ECHO_SUM.replace("a + b", "a - b")
    jobs = [
        EvalJob(task, ECHO_SUM, EvalSettings(metric="instructions")),
        EvalJob(task, wrong, EvalSettings(metric="instructions")),
        EvalJob(task, "int main( {", EvalSettings(metric="instructions")),
    ]
    local = _evaluate(LocalExecutor(), jobs)
    remote = _evaluate(RayExecutor(), jobs)
    assert [f.correct for f in remote] == [True, False, False]
    assert [f.compiled for f in remote] == [True, True, False]
    for ours, theirs in zip(local, remote):
        assert ours.candidate_costs == theirs.candidate_costs
        assert ours.reference_costs == theirs.reference_costs
        assert ours.tests_passed == theirs.tests_passed
        assert ours.error == theirs.error


def _ray_evaluators() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if handle.read().startswith(b"ray::evaluate_on_worker"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.slow  # about 17 s of a ray cluster
def test_a_worker_killed_mid_evaluation_is_retried(ray_cluster: None, tmp_path: Path) -> None:
    from maxcode.executors.ray_executor import RayExecutor

    task = load_task(str(write_task(tmp_path / "t")))
    killed: list[int] = []

    def kill_the_first_evaluator() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for pid in _ray_evaluators():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_first_evaluator)
    killer.start()
    (feedback,) = _evaluate(
        RayExecutor(max_retries=3), [EvalJob(task, SLOW, EvalSettings(repeats=1))]
    )
    killer.join()
    assert killed, "no evaluating worker was seen"
    assert feedback.correct and feedback.tests_passed == 2
    assert killed[0] not in _ray_evaluators()


def test_bench_on_ray_runs_searches_in_parallel_with_the_local_table(tmp_path: Path) -> None:
    first = write_task(tmp_path / "first")
    second = write_task(tmp_path / "second", toml='name = "second"\nkind = "cpp"\n')
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "disabled"}
    tables = {}
    for executor in ("local", "ray"):
        store = tmp_path / f"{executor}.db"
        command = [
            sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "bench",
            str(first), str(second), "--method", "best-of-n", "--method", "cuda-llm",
            "--depth", "1", "--candidates", "2", "--metric", "instructions",
            "--executor", executor, "--concurrency", "2", "--store", str(store), "--json",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        tables[executor] = json.loads(done.stdout)
    for local, remote in zip(tables["local"]["methods"], tables["ray"]["methods"]):
        assert remote["tasks"] == local["tasks"] == 2
        assert remote["unfinished"] == 0
        for key in ("mean_speedup", "correct", "evaluations", "fast_p", "average_rank"):
            assert remote[key] == pytest.approx(local[key]), key


def test_a_cuda_evaluation_asks_ray_for_a_whole_gpu(tmp_path: Path) -> None:
    from maxcode.executors.ray_executor import ray_resources

    task = load_task(str(write_task(tmp_path / "sum")))
    on_gpu = EvalJob(task, ECHO_SUM, EvalSettings(device="cuda"))
    on_cpu = EvalJob(task, ECHO_SUM, EvalSettings(device="cpu"))
    assert ray_resources(on_gpu) == {"num_cpus": 1, "num_gpus": 1}
    assert ray_resources(on_cpu) == {"num_cpus": 1, "num_gpus": 0}
