"""The local executor: several evaluations awaited at once share its limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

from maxcode.executors import EvalJob, LocalExecutor
from maxcode.harness.settings import EvalSettings
from maxcode.kinds.load import load_task
from tests.helpers import ECHO_SUM, write_task


def test_concurrent_evaluations_without_setup_share_the_slots(tmp_path: Path) -> None:
    task = load_task(str(write_task(tmp_path / "t")))
    executor = LocalExecutor(workers=1)
    sources = [ECHO_SUM + f"// variant {index}\n" for index in range(3)]

    async def run() -> list[bool]:
        verdicts = await asyncio.gather(
            *(
                executor.evaluate(EvalJob(task, source, EvalSettings(repeats=1)))
                for source in sources
            )
        )
        return [verdict.correct for verdict in verdicts]

    assert asyncio.run(run()) == [True, True, True]
