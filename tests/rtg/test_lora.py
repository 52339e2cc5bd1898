"""LoRA fine-tuning of a tiny model built here from a config (no downloads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="needs maxcode[train]")
pytest.importorskip("peft", reason="needs maxcode[train]")
pytest.importorskip("torch", reason="needs maxcode[train]")


def _tiny_model(folder: Path, corpus: list[str]) -> Path:
    """A one-layer GPT-2 and a word-level tokenizer trained on the corpus, saved to folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    numbers = [f"{whole} . {part:02d}" for whole in range(10) for part in range(100)]
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"])
    tokenizer.train_from_iterator(corpus + numbers, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    config = GPT2Config(
        vocab_size=fast.vocab_size, n_positions=512, n_embd=32, n_layer=1, n_head=2,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
    )  # fmt: skip
    import torch

    # The base model's weights seeded: unseeded, one fresh-clone run in about 25 drew weights
    # from which 40 epochs did not learn to write 2.50 (it wrote 5050.5).
    torch.manual_seed(0)
    GPT2LMHeadModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def _rows() -> list[dict[str, object]]:
    rows = []
    for index in range(6):
        rows.append(
            {"run_id": "r", "parent_id": "0", "task": "t", "split": "train",
             "prompt": "Task: sum two numbers", "completion": f"int main() {{ return {index}; }}",
             "label": 2.5}
        )  # fmt: skip
    return rows


def test_lora_fine_tuning_trains_and_scores(tmp_path: Path) -> None:
    from maxcode.rtg import load_model
    from maxcode.rtg.lora import model_input, train_lora

    rows = _rows()
    corpus = [model_input(str(r["prompt"]), str(r["completion"])) for r in rows]
    base = _tiny_model(tmp_path / "tiny", corpus)
    train_lora(rows, str(base), tmp_path / "adapter", epochs=40, learning_rate=1e-2)
    meta = json.loads((tmp_path / "adapter" / "model.json").read_text())
    assert meta["kind"] == "lora" and meta["base"] == str(base.resolve())
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    model = load_model(str(tmp_path / "adapter"))
    import asyncio

    scores = asyncio.run(model.score("Task: sum two numbers", ["int main() { return 3; }"]))
    assert scores == [pytest.approx(2.5)]


@pytest.mark.slow  # LoRA training from the command line, about 13 s
def test_rtg_train_with_base_through_the_command_line(tmp_path: Path) -> None:
    from maxcode.rtg.lora import model_input

    rows = _rows()
    base = _tiny_model(
        tmp_path / "tiny", [model_input(str(r["prompt"]), str(r["completion"])) for r in rows]
    )
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "rtg", "train",
         str(data), "-o", str(tmp_path / "out"), "--base", str(base), "--epochs", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fine-tuned" in done.stderr
    assert (tmp_path / "out" / "model.json").is_file()
    missing = subprocess.run(
        [sys.executable, "-c", "from maxcode.cli import run_cli; run_cli()", "rtg", "train",
         str(data), "-o", str(tmp_path / "out2"), "--base", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert missing.returncode == 2 and "not a model folder" in missing.stderr
