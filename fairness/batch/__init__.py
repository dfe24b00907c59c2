"""The batch lane: OpenAI's Files and Batch APIs, run by the portal into idle capacity.

It sits above the gateway (its API is served by the gateway's adapter, and its batch runner sends
each line through the gateway's own views and admission) and below telemetry and the portal
(whose pages show it)."""
