"""enginesim: a CPU-only stand-in for a vLLM OpenAI-compatible server.

Continuous batching over ``max_num_seqs`` slots with a step-time model, a block-hashed prefix
cache with a KV budget, vLLM's /metrics names, abort on client disconnect and runtime fault
switches; or, with ``--instant``, immediate answers for measuring a gateway's own overhead.
Standalone: no Django. Start it with ``python -m enginesim`` or ``enginesim.process``.
See README.md in this directory.
"""

__version__ = "0.1.0+enginesim"
