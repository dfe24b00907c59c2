"""What was used and by whom: usage events flushed into records and hourly rows, fair-share usage
saved from Redis, and the notices of keys about to expire. Below telemetry (which counts what
this records) and the pages; above the gateway, whose accounting events it writes down."""
