"""``python -m enginesim``: parse the flags and serve until SIGINT / SIGTERM."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import uvicorn

from .config import SimConfig, parse_args
from .server import EngineSimApp


def serve(config: SimConfig) -> None:
    app = EngineSimApp(config)
    mode = "instant" if config.instant else f"speed x{config.speed:g}"
    print(f"enginesim: serving {config.model!r} ({mode}, max_num_seqs={config.max_num_seqs}) "
          f"on http://{config.host}:{config.port}", flush=True)
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        access_log=False,
        lifespan="on",
        backlog=4096,
        # A stalled request (fault switch) must not hold shutdown hostage.
        timeout_graceful_shutdown=2,
    )


def main(argv: Sequence[str] | None = None) -> None:
    serve(parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
