"""The batch lane: OpenAI's Files and Batch APIs, run by the portal into idle capacity (issue 19).

It sits above the gateway (its API is served by the gateway's adapter, and its batches will run
through the gateway's admission) and below telemetry and the portal (whose pages show it)."""
