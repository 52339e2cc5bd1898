"""``maxcode llm``: commands about the model configuration.

``maxcode llm check --model M`` sends a one-line prompt and prints what came back (model,
latency, tokens, cost): a quick way to verify a key, a model name or a local server. A bad
configuration prints one ``error: ...`` line on stderr and exits 2.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

import click

from maxcode.errors import MaxcodeError
from maxcode.llm._accounting import InMemoryCallLog
from maxcode.llm._errors import one_line
from maxcode.llm._provider import RetryPolicy
from maxcode.llm._records import LLMRequest
from maxcode.llm._registry import resolve_model

CHECK_PROMPT = "Reply with the single word: ok"


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What ``llm check`` found."""

    model: str
    """``provider/model`` as configured."""
    served_by: str
    """The model name the server reported."""
    endpoint: str
    """Where the request went."""
    latency_s: float
    """Seconds for the call, retries included."""
    prompt_tokens: int | None
    """Input tokens billed (None when the server did not report usage)."""
    completion_tokens: int | None
    """Output tokens billed."""
    cost_usd: float | None
    """Price of the call; None when the model's price is unknown."""
    reply: str
    """The beginning of the answer."""
    finish_reason: str | None
    """Why the answer stopped."""


async def check_model(
    spec: str, base_url: str | None = None, timeout: float = 60.0, retries: int = 1
) -> CheckResult:
    """Send the check prompt to ``spec`` and report the call."""
    call_log = InMemoryCallLog()
    provider = resolve_model(
        spec,
        base_url=base_url,
        call_log=call_log,
        retry=RetryPolicy(max_retries=retries, base_delay_s=0.5, max_retry_after_s=10.0),
    )
    request = LLMRequest.from_prompt(
        CHECK_PROMPT, temperature=0.0, max_tokens=256, timeout=timeout, purpose="check"
    )
    async with provider:
        completions = await provider.generate(request)
    call = call_log.calls[-1]
    completion = completions[0]
    return CheckResult(
        model=provider.spec,
        served_by=completion.model,
        endpoint=provider.endpoint,
        latency_s=call.latency_s,
        prompt_tokens=call.prompt_tokens,
        completion_tokens=call.completion_tokens,
        cost_usd=call.cost_usd,
        reply=one_line(completion.text, 200),
        finish_reason=completion.finish_reason,
    )


def _format_cost(cost: float | None) -> str:
    return "unknown (no price for this model)" if cost is None else f"${cost:.6f}"


def _format_tokens(count: int | None) -> str:
    return "?" if count is None else str(count)


@click.group(name="llm")
def llm_group() -> None:
    """Check and inspect the language-model configuration."""


@llm_group.command(name="check")
@click.option(
    "--model",
    "model",
    envvar="MAXCODE_MODEL",
    required=True,
    help="provider/model: openai/gpt-4o-mini, anthropic/claude-sonnet-4-5, ollama/qwen2.5-coder, "
    "vllm/MODEL, rules.",
)
@click.option(
    "--base-url",
    envvar="MAXCODE_BASE_URL",
    default=None,
    help="Endpoint of an OpenAI-compatible (or Anthropic) server.",
)
@click.option(
    "--timeout",
    envvar="MAXCODE_LLM_TIMEOUT",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the reply.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def check_command(model: str, base_url: str | None, timeout: float, as_json: bool) -> None:
    """Send a one-line prompt to MODEL and print model, latency, tokens and cost."""
    try:
        result = asyncio.run(check_model(model, base_url=base_url, timeout=timeout))
    except MaxcodeError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(result)))
        return
    click.echo(f"model:    {result.model} (served by {result.served_by})")
    click.echo(f"endpoint: {result.endpoint}")
    click.echo(f"latency:  {result.latency_s:.2f} s")
    click.echo(
        f"tokens:   {_format_tokens(result.prompt_tokens)} prompt + "
        f"{_format_tokens(result.completion_tokens)} completion"
    )
    click.echo(f"cost:     {_format_cost(result.cost_usd)}")
    click.echo(f"reply:    {result.reply!r} (finish: {result.finish_reason})")


if __name__ == "__main__":
    llm_group()
