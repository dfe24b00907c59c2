"""Which paths the gateway answers (the rest are the portal's pages): /v1/, and the few that an
engine serves elsewhere: Cohere's rerank shape at /v2/rerank, and vLLM's tokenizer."""

PREFIX = "/v1/"
OUTSIDE_PREFIX = frozenset({"/v2/rerank", "/tokenize", "/detokenize"})


def is_api_path(path: str) -> bool:
    return path.startswith(PREFIX) or path.rstrip("/") in OUTSIDE_PREFIX
