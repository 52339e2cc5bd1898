"""Command-line options generated from a settings record (``EvalRequest`` for ``maxcode eval``,
``SearchConfig`` for ``optimize`` and ``bench``), so that a setting is stated once: its flag
``--name-with-dashes``, its variable ``MAXCODE_NAME``, its type, bounds, choices and help all
come from the record's field."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def help_text(field: Any) -> str:
    """A setting's help: the first sentence of its field's docstring, and its default."""
    text = " ".join((field.description or "").replace("``", "").split())
    text = text.replace("; None for", "; unset:").replace("None: ", "unset: ")
    sentence = text.split(". ")[0].rstrip(".") + "."
    default = field.default
    if isinstance(default, bool):
        return f"{sentence} (default: {'on' if default else 'off'})"
    if default is None or default == "":
        return sentence
    return f"{sentence} (default: {default})"


def setting_option(name: str, field: Any) -> Callable[[F], F]:
    """The click option of one setting. Options default to None, so that only what a user
    gave overrides a YAML file and the record's own default."""
    flag = "--" + name.replace("_", "-")
    envvar = "MAXCODE_" + name.upper()
    annotation = field.annotation
    choices: tuple[Any, ...] = ()
    types = {annotation}
    if typing.get_origin(annotation) is typing.Literal:
        choices = typing.get_args(annotation)
    elif typing.get_args(annotation):
        types = {given for given in typing.get_args(annotation) if given is not type(None)}
        literals = [given for given in types if typing.get_origin(given) is typing.Literal]
        if len(types) == 1 and literals:  # an optional choice (unset: the default's rule)
            choices = typing.get_args(literals[0])
    bounds = {
        key: getattr(rule, key)
        for rule in field.metadata
        for key in ("ge", "gt", "le", "lt")
        if getattr(rule, key, None) is not None
    }
    if bool in types:
        return click.option(
            f"{flag}/--no-{flag[2:]}", name, default=None, envvar=envvar, help=help_text(field)
        )
    kind: Any = None
    if choices:
        kind = click.Choice([str(choice) for choice in choices])
    elif int in types:
        kind = click.IntRange(min=bounds.get("ge", bounds.get("gt")), min_open="gt" in bounds)
    elif float in types:
        kind = click.FloatRange(
            min=bounds.get("ge", bounds.get("gt")),
            min_open="gt" in bounds,
            max=bounds.get("le"),
        )
    return click.option(flag, name, type=kind, default=None, envvar=envvar, help=help_text(field))


def setting_options(model: Any, skip: Iterable[str] = ()) -> list[Callable[[F], F]]:
    """The options of every field of ``model`` but ``skip``'s, in the record's order."""
    left_out = set(skip)
    return [
        setting_option(name, field)
        for name, field in model.model_fields.items()
        if name not in left_out
    ]


def with_options(options: list[Callable[[F], F]]) -> Callable[[F], F]:
    """A decorator that adds ``options`` to a command, the first shown first."""

    def apply(function: F) -> F:
        for option in reversed(options):
            function = option(function)
        return function

    return apply


def typed(ctx: click.Context) -> set[str]:
    """The parameters set on the command line itself (not by a variable or a default)."""
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }


def given(ctx: click.Context) -> set[str]:
    """The parameters set by a flag or a variable (not left at their default)."""
    return {
        name
        for name in ctx.params
        if ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)
    }
