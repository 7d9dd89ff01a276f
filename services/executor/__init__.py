"""The executor: runs each fired run at least once, with an effectively-once outcome.

The SDK of a team's own executor process (docs/executors.md):

    from kairos.services.executor import ExecutorSettings, Handlers, RunContext, run_executor

    handlers = Handlers()

    @handlers.handler("record-settlement")
    def record_settlement(run: RunContext) -> None: ...

    run_executor(KafkaSettings(bootstrap_servers=...),
                 ExecutorSettings(instance="billing-1", state_dir=..., kinds={"python"},
                                  dedupe_url="postgresql://billing@db/billing"),
                 handlers)

or, without a program of its own: `kairos executor --handlers billing.jobs:handlers --kinds python`.
"""

from kairos.services.executor.handlers import ANY_TEAM, Handlers, RunContext
from kairos.services.executor.service import Executor, run_executor
from kairos.services.executor.settings import ExecutorSettings
from kairos.streams.dedupe.base import HandlerTransaction

__all__ = [
    "ANY_TEAM",
    "Executor",
    "ExecutorSettings",
    "HandlerTransaction",
    "Handlers",
    "RunContext",
    "run_executor",
]
