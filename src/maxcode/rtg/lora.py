"""Fine-tuning a generative reward-to-go model with LoRA (``maxcode[train]``: transformers, peft,
torch). The model reads the observation and the candidate and writes the label as text; on a
GPU in practice (the MaxCode paper tunes Qwen2.5-7B-Instruct), on the CPU for small models."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from maxcode.errors import MaxcodeError
from maxcode.rtg.generative import parse_score

TRAIN_HINT = "fine-tuning needs transformers, peft and torch: pip install 'maxcode[train]'"
LORA_SCHEMA_VERSION = 1
_OBSERVATION_CHARS = 2000
_PROGRAM_CHARS = 3000


def model_input(observation: str, candidate: str) -> str:
    """What the model reads (the ends of long texts are kept)."""
    return (
        f"Situation:\n{observation[-_OBSERVATION_CHARS:]}\n\nProgram:\n"
        f"{candidate[-_PROGRAM_CHARS:]}\n\nExpected best speedup:"
    )


def _libraries() -> tuple[Any, Any, Any, Any]:
    try:
        import peft
        import torch
        import transformers
    except ImportError:
        raise MaxcodeError(TRAIN_HINT) from None
    return torch, transformers, peft, transformers.AutoTokenizer


def train_lora(
    rows: list[dict[str, Any]],
    base: str,
    output: Path,
    *,
    epochs: int = 3,
    learning_rate: float = 2e-4,
    rank: int = 8,
    seed: int = 0,
) -> None:
    """Fine-tune ``base`` (a local model folder) on the rows' labels; save the adapter."""
    torch, transformers, peft, auto_tokenizer = _libraries()
    if not Path(base).is_dir():
        raise MaxcodeError(f"--base {base}: not a model folder (download it first)")
    torch.manual_seed(seed)
    tokenizer = auto_tokenizer.from_pretrained(base)
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    config = peft.LoraConfig(
        r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear",
        task_type="CAUSAL_LM",
    )  # fmt: skip
    model = peft.get_peft_model(model, config)
    model.train()
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate)
    limit = int(
        getattr(model.config, "n_positions", 0)
        or getattr(model.config, "max_position_embeddings", 2048)
    )
    examples = []
    for row in rows:
        prompt = tokenizer(model_input(str(row["prompt"]), str(row["completion"])))["input_ids"]
        target = tokenizer(f" {float(row['label']):.2f}")["input_ids"]
        if tokenizer.eos_token_id is not None:
            target = [*target, tokenizer.eos_token_id]
        prompt = prompt[-(limit - len(target)) :]
        examples.append((prompt + target, [-100] * len(prompt) + target))
    order = list(range(len(examples)))
    shuffle = random.Random(seed)
    for _ in range(epochs):
        shuffle.shuffle(order)
        for index in order:
            ids, labels = examples[index]
            loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    meta = {
        "kind": "lora",
        "schema_version": LORA_SCHEMA_VERSION,
        "base": str(Path(base).resolve()),
    }
    (output / "model.json").write_text(json.dumps(meta))


class LoRAModel:
    """A fine-tuned reward-to-go model run here (serve it with vLLM for speed)."""

    def __init__(self, folder: Path) -> None:
        torch, transformers, peft, auto_tokenizer = _libraries()
        meta = json.loads((folder / "model.json").read_text())
        base = transformers.AutoModelForCausalLM.from_pretrained(meta["base"])
        self.model = peft.PeftModel.from_pretrained(base, str(folder))
        self.model.eval()
        self.tokenizer = auto_tokenizer.from_pretrained(str(folder))
        self.torch = torch
        self.name = f"lora:{folder}"

    def predict(self, observation: str, candidate: str) -> float:
        """The number the model writes for one candidate (0 when it writes none)."""
        ids = self.tokenizer(model_input(observation, candidate))["input_ids"]
        limit = int(getattr(self.model.config, "n_positions", 0) or 2048)
        ids = ids[-(limit - 8) :]
        with self.torch.no_grad():
            produced = self.model.generate(
                input_ids=self.torch.tensor([ids]),
                attention_mask=self.torch.ones(1, len(ids), dtype=self.torch.long),
                max_new_tokens=6,
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        text = self.tokenizer.decode(produced[0][len(ids) :], skip_special_tokens=True)
        return parse_score(text.replace(" ", ""))

    async def score(self, observation: str, candidates: list[str]) -> list[float]:
        """One predicted reward-to-go per candidate."""
        return [self.predict(observation, candidate) for candidate in candidates]
