"""Executor pools: the name a schedule gives the executors that may run it.

A schedule names its pool (`pool: gpu`); one that names none runs in `DEFAULT_POOL`. The ticker
copies the pool into each `RunRequested`, and an executor takes only the runs of the pools it
serves (`kairos executor --pool`), passing the others over for the executors that serve them.
The rule for a pool name lives here alone, for the schedule model and the executor's flags.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

DEFAULT_POOL = "default"
"""The pool of a schedule that names none, and of an executor started without `--pool`."""

POOL_NAME = re.compile(r"[a-z0-9._-]{1,64}")

_POOL_RULE = "1–64 characters of lower-case letters, digits and . _ -"


class PoolNameError(ValueError):
    """A pool name breaks the rule; the message names it and the rule."""


def pool_name(value: str) -> str:
    """`value` if it is a valid pool name; raises `PoolNameError` saying what to write."""
    if not POOL_NAME.fullmatch(value):
        raise PoolNameError(
            f"{value!r} is not a pool name; use {_POOL_RULE}, such as 'gpu' or 'eu-batch'"
        )
    return value


Pool = Annotated[str, AfterValidator(pool_name)]
"""A validated pool name, for pydantic models."""


def run_pool(pool: str | None) -> str:
    """The pool a run goes to: the schedule's, or `DEFAULT_POOL` when it names none."""
    return DEFAULT_POOL if pool is None else pool
