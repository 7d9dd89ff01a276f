"""The effect every `python` job of the load has: one row in the dedupe store's transaction.

The row commits with the attempt's outcome or not at all, so the table counts the runs whose
outcome took effect; a run id with two rows was executed twice. The executor loads these with
`--handlers bench.reliability.effects:handlers`; its instance name comes from
`KAIROS_RELIABILITY_EXECUTOR`.
"""

from __future__ import annotations

import os

from bench.reliability.load import EFFECT_HANDLER, OWNER
from kairos.services.executor.handlers import Handlers, RunContext

EFFECTS_TABLE = "reliability_effects"
CREATE_EFFECTS = (
    f"CREATE TABLE IF NOT EXISTS {EFFECTS_TABLE} "
    "(run_id TEXT NOT NULL, executor TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT now())"
)
EXECUTED_TWICE = f"SELECT run_id, count(*) FROM {EFFECTS_TABLE} GROUP BY run_id HAVING count(*) > 1"

handlers = Handlers()


@handlers.handler(EFFECT_HANDLER, teams=(OWNER,))
def record_effect(run: RunContext) -> None:
    executor = os.environ.get("KAIROS_RELIABILITY_EXECUTOR", "unknown")
    run.transaction().execute(
        f"INSERT INTO {EFFECTS_TABLE} (run_id, executor) VALUES (%s, %s)", (run.run_id, executor)
    )
