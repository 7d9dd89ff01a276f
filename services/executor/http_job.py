"""`http` jobs: one request, its run id as the idempotency key."""

from __future__ import annotations

import urllib.error
import urllib.request

from kairos.services.executor.jobs import HttpJob, Invocation, JobFailedError, payload_bytes


def run_http(job: HttpJob, invocation: Invocation, output_limit: int) -> None:
    headers = {
        **job.headers,
        # The run id is the idempotency key: a retried or redelivered run sends the same one,
        # so a service that honours it applies the request's effect once.
        "Idempotency-Key": invocation.run_id,
        "X-Kairos-Schedule-Id": invocation.schedule_id,
        "X-Kairos-Attempt": str(invocation.attempt),
    }
    if isinstance(job.body, dict | list):
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(
        job.url, data=payload_bytes(job.body), headers=headers, method=job.method.upper()
    )
    try:
        # The timeout bounds the connection and each read; a stop request cannot interrupt
        # a request in flight, so http jobs stop at the latest when their timeout passes.
        with urllib.request.urlopen(request, timeout=max(0.001, invocation.remaining_s())) as r:
            status, body = r.status, r.read(output_limit)
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read(output_limit)
    except (urllib.error.URLError, OSError) as error:
        if isinstance(error, TimeoutError) or invocation.remaining_s() <= 0:
            raise JobFailedError(invocation.timed_out_reason()) from None
        cause = error.reason if isinstance(error, urllib.error.URLError) else error
        raise JobFailedError(f"request to {job.url} failed: {cause}") from None
    if not 200 <= status < 300:
        text = body.decode(errors="replace").strip()
        raise JobFailedError(f"HTTP {status}" + (f": {text}" if text else ""))
