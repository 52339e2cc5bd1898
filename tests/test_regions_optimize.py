"""``maxcode optimize MODEL --regions N``: the regions searched with a scripted model server,
their kernels put back into the model, and the model judged against the original."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

from maxcode.store import RunStore
from tests.helpers import REPO, eval_json, run_maxcode, run_optimize
from tests.llm.fake_llm_server import Step, is_critic, serving

MODELS = REPO / "tests" / "fixtures" / "models"
MODEL = MODELS / "slow_parts.py"
KERNELS = {
    # The region's name as its problem file states it, and the kernel the "model" answers.
    "the region `act`": (MODELS / "slow_parts_act.py").read_text(),
    "the region `norm`": (MODELS / "slow_parts_norm.py").read_text(),
}


def answer(body: dict[str, Any]) -> Step:
    if is_critic(body):
        return Step(texts=["Diagnosis: fine.\nSuggestions:\n- none"])
    prompt = "\n".join(str(message.get("content", "")) for message in body["messages"])
    for marker, kernel in KERNELS.items():
        if marker in prompt:
            return Step(texts=[f"One call instead of a loop.\n\n```python\n{kernel}```\n"])
    return Step(texts=["No idea."])


def closed_port() -> int:
    """A loopback port with nothing listening."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_two_regions_searched_one_kernel_kept_the_other_dropped_for_its_layout(
    tmp_path: Path,
) -> None:
    stitched, store, page = tmp_path / "stitched.py", tmp_path / "runs.db", tmp_path / "r.html"
    # The model's server is down: the regions' searches stop, and what they recorded (one
    # bench of their runs, the probe's cut) is kept for --resume.
    down = run_optimize(
        str(MODEL), "--regions", "2", "--device", "cpu",
        "--model", "openai/gpt-4o-mini", "--base-url", f"http://127.0.0.1:{closed_port()}/v1",
        "--method", "best-of-n", "--candidates", "1", "--depth", "1", "--max-llm-calls", "9",
        "--store", str(store), "-o", str(stitched), "--json",
    )  # fmt: skip
    assert down.returncode != 0 and "Traceback" not in down.stderr
    assert down.stderr.strip().splitlines()[-1].startswith("error: ")
    bench = re.search(r"maxcode optimize --resume (\w+)", down.stderr)
    assert bench is not None, down.stderr
    assert report(bench[1], store, page) and "have not all finished" in page.read_text()
    # The regions' runs side by side (2 at once), the model's budget shared out between them.
    recorded = RunStore(store)
    stored = recorded.get_bench(bench[1])
    assert stored is not None and stored.config["concurrency"] == 2
    assert [run.config["max_llm_calls"] for run in recorded.bench_runs(bench[1])] == [4, 4]
    recorded.close()
    with serving(answer) as server:
        done = run_optimize(
            "--resume", bench[1], "--base-url", server.url, "--store", str(store), "--json"
        )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["bench"] == bench[1]
    regions = {region["name"]: region for region in result["regions"]}
    # The two row-by-row loops are the forward's time; each region had a run of its own.
    assert set(regions) == {"act", "norm"}
    assert all(region["run"] and Path(region["problem"]).is_file() for region in regions.values())
    # Both kernels are right and faster on their own problems (contiguous inputs) ...
    assert regions["act"]["speedup_interval"][0] > 1.0
    assert regions["norm"]["speedup_interval"][0] > 1.0
    # ... but the layer norm's reads its input as if contiguous, and the model gives it a
    # transposed view: wrong inside the model, dropped, with why.
    assert regions["act"]["kept"] and regions["act"]["why"].startswith("kept")
    assert not regions["norm"]["kept"]
    assert regions["norm"]["why"].startswith("wrong inside the model")
    model = result["model"]
    # -o, given before the stop, still names the stitched model's file.
    assert model["correct"] is True and model["stitched"] == str(stitched)
    assert len(model["speedup_interval"]) == 2 and isinstance(model["speedup"], float)
    share = regions["act"]["share"]
    assert model["predicted"] == 1 / (1 - share * (1 - 1 / regions["act"]["speedup"]))
    # The bench's report shows the regions and the model's verdict.
    assert report(bench[1], store, page)
    html = page.read_text()
    assert "The model, region by region" in html and "wrong inside the model" in html
    assert f"{model['predicted']:.2f}x" in html
    # The stitched model is a candidate file `maxcode eval MODEL STITCHED` judges again.
    again = eval_json(str(MODEL), str(stitched), "--rounds", "1")
    assert again["correct"]
    assert "F.gelu" in stitched.read_text() and "as_strided" not in stitched.read_text()
    # A bench --resume of it is refused: only optimize --resume judges the model.
    refused = run_maxcode("bench", "--resume", bench[1], "--store", str(store))
    assert refused.returncode == 2 and f"maxcode optimize --resume {bench[1]}" in refused.stderr


def report(bench: str, store: Path, page: Path) -> bool:
    written = run_maxcode("report", "--bench", bench, "--store", str(store), "-o", str(page))
    assert written.returncode == 0, written.stderr
    return page.is_file()


def test_regions_refuse_a_changed_resume_and_a_model_that_does_not_run_in_one_line(
    tmp_path: Path,
) -> None:
    resumed = run_optimize("--resume", "abc", "--regions", "1")
    assert resumed.returncode == 2 and "--resume takes only" in resumed.stderr
    broken = run_optimize(str(MODELS / "broken_forward.py"), "--regions", "1", "--device", "cpu")
    assert broken.returncode == 2 and "the model does not run" in broken.stderr
    assert "Traceback" not in broken.stderr + resumed.stderr
