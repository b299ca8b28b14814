"""Counting what the limits decide with prometheus_client: admitted,
refused and shed requests per policy and route.

    pip install prometheus-client
    uvicorn metrics:app        # then GET /metrics

Every front door takes ``on_decision``; it is called once per limited
request with a ``rb.RateLimitEvent`` and costs nothing when not set.
"""

from __future__ import annotations

from fastapi import Depends, FastAPI
from prometheus_client import CollectorRegistry, Counter, generate_latest
from starlette.responses import Response

import ratebound as rb
import ratebound.fastapi

registry = CollectorRegistry()
decisions = Counter(
    "ratebound_requests",
    "Requests the rate limits decided, by policy, route and outcome",
    ["policy", "route", "outcome"],
    registry=registry,
)


def count(event: rb.RateLimitEvent) -> None:
    if event.outcome == "refused":
        # The one policy that refused.
        decisions.labels(event.policy, event.label or "", "refused").inc()
    else:
        # Admitted (or shed, or rejected): every policy of the limit saw it.
        for policy in event.policies:
            decisions.labels(policy, event.label or "", event.outcome).inc()


app = FastAPI()
login = rb.fastapi.limit("5/minute", on_decision=count)
api = rb.fastapi.limit(policies={"burst": "10/s burst 20", "hourly": "1000/hour"}, key="x-api-key", on_decision=count)


@app.post("/login", dependencies=[Depends(login)])
def do_login() -> dict:
    return {"ok": True}


@app.get("/api/items", dependencies=[Depends(api)])
def items() -> list:
    return []


@app.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")
