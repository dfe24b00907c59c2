"""Command-line flags and the configuration they build (vLLM's flag names where one exists)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Faults:
    """Switches that make the server misbehave on purpose, for gateway tests."""

    health_fail: bool = False  # /health answers 503
    error_500: bool = False  # completions answer 500
    stall: bool = False  # completions accept the request and never send a byte
    # Completions whose body contains this text answer 500 ("": off): one poisoned request
    # failing while everyone else's succeed.
    error_500_marker: str = ""

    def as_dict(self) -> dict[str, bool | str]:
        return {"health_fail": self.health_fail, "error_500": self.error_500, "stall": self.stall,
                "error_500_marker": self.error_500_marker}


@dataclass
class SimConfig:
    model: str = "enginesim"
    host: str = "127.0.0.1"
    port: int = 8000
    max_num_seqs: int = 32
    max_model_len: int = 4096
    block_size: int = 16
    num_gpu_blocks: int | None = None  # None: enough for max_num_seqs full-length sequences
    enable_prefix_caching: bool = True
    scheduling_policy: str = "fcfs"
    step_base_ms: float = 9.8
    step_per_seq_ms: float = 0.19
    prefill_tokens_per_second: float = 8000.0
    speed: float = 1.0
    instant: bool = False
    api_key: str | None = None
    default_max_tokens: int = 16
    # vLLM's flag: usage carries prompt_tokens_details.cached_tokens (else null).
    enable_prompt_tokens_details: bool = False
    log_level: str = "warning"
    # vLLM's --runner: "generate" serves chat and completions, "pooling" (an embedding model) embeddings.
    runner: str = "generate"
    embedding_size: int = 128
    faults: Faults = field(default_factory=Faults)

    @property
    def gpu_blocks(self) -> int:
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        return self.max_num_seqs * -(-self.max_model_len // self.block_size)

    def validate(self) -> None:
        if self.max_num_seqs < 1 or self.default_max_tokens < 1:
            raise ValueError("--max-num-seqs and --default-max-tokens must be at least 1")
        if self.block_size < 1 or self.max_model_len < 2:
            raise ValueError("--block-size and --max-model-len must be positive")
        if self.speed <= 0 or self.prefill_tokens_per_second <= 0:
            raise ValueError("--speed and --prefill-tokens-per-second must be positive")
        if self.step_base_ms < 0 or self.step_per_seq_ms < 0:
            raise ValueError("step times cannot be negative")
        # One full-length sequence must always fit, or the scheduler could wait forever.
        if self.gpu_blocks < -(-self.max_model_len // self.block_size):
            raise ValueError("--num-gpu-blocks cannot hold one --max-model-len sequence")
        if self.runner not in ("generate", "pooling"):
            raise ValueError("--runner must be generate or pooling")
        if self.embedding_size < 1:
            raise ValueError("--embedding-size must be positive")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError("--scheduling-policy must be fcfs or priority")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m enginesim",
        description="A CPU-only simulator of a vLLM OpenAI-compatible server.",
    )
    add = p.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=8000)
    add("--model", default="enginesim", help="model id served and expected in requests")
    add("--served-model-name", default=None, help="overrides --model as the served id")
    add("--max-num-seqs", type=int, default=32, help="slots in the running batch")
    add("--max-model-len", type=int, default=4096, help="prompt + max_tokens limit")
    add("--block-size", type=int, default=16, help="tokens per KV block")
    add("--num-gpu-blocks", type=int, default=None,
        help="KV budget in blocks (default: max_num_seqs * max_model_len / block_size)")
    add("--enable-prefix-caching", dest="enable_prefix_caching", action="store_true",
        default=True, help="on by default")
    add("--no-prefix-caching", "--no-enable-prefix-caching", dest="enable_prefix_caching",
        action="store_false")
    add("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    add("--step-base-ms", type=float, default=9.8, help="decode step time: a in a + c*batch")
    add("--step-per-seq-ms", type=float, default=0.19, help="decode step time: c in a + c*batch")
    add("--prefill-tokens-per-second", type=float, default=8000.0,
        help="rate at which uncached prompt tokens are prefilled")
    add("--speed", type=float, default=1.0, help="divide every duration by this factor")
    add("--instant", action="store_true",
        help="no timing: answer at once with max_tokens tokens (for overhead benchmarks)")
    add("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1/*")
    add("--default-max-tokens", type=int, default=16, help="max_tokens when a request has none")
    add("--enable-prompt-tokens-details", action="store_true",
        help="report usage.prompt_tokens_details.cached_tokens, the prompt tokens found in the prefix cache")
    add("--runner", choices=("generate", "pooling"), default="generate",
        help="pooling: an embedding model, serving /v1/embeddings instead of chat and completions")
    add("--embedding-size", type=int, default=128, help="floats in an embedding (pooling)")
    add("--fail-health", action="store_true", help="start with /health answering 503")
    add("--error-500", action="store_true", help="start with completions answering 500")
    add("--stall", action="store_true", help="start with completions never answering")
    add("--error-500-marker", default="", metavar="TEXT",
        help="completions whose body contains TEXT answer 500")
    add("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    return p


def parse_args(argv: Sequence[str] | None = None) -> SimConfig:
    parser = build_parser()
    ns = parser.parse_args(argv)
    config = SimConfig(
        model=ns.served_model_name or ns.model,
        host=ns.host,
        port=ns.port,
        max_num_seqs=ns.max_num_seqs,
        max_model_len=ns.max_model_len,
        block_size=ns.block_size,
        num_gpu_blocks=ns.num_gpu_blocks,
        enable_prefix_caching=ns.enable_prefix_caching,
        scheduling_policy=ns.scheduling_policy,
        step_base_ms=ns.step_base_ms,
        step_per_seq_ms=ns.step_per_seq_ms,
        prefill_tokens_per_second=ns.prefill_tokens_per_second,
        speed=ns.speed,
        instant=ns.instant,
        api_key=ns.api_key,
        default_max_tokens=ns.default_max_tokens,
        enable_prompt_tokens_details=ns.enable_prompt_tokens_details,
        log_level=ns.log_level,
        runner=ns.runner,
        embedding_size=ns.embedding_size,
        faults=Faults(health_fail=ns.fail_health, error_500=ns.error_500, stall=ns.stall,
                      error_500_marker=ns.error_500_marker),
    )
    try:
        config.validate()
    except ValueError as exc:
        parser.error(str(exc))
    return config
