"""The /v1/ endpoints in OpenAPI terms, for the one document at /api/docs.

The gateway is served by its own ASGI adapter, not django-ninja, so ninja cannot describe it;
the portal's API merges these paths into its own schema (fairness/portal/api/public.py). A test
checks that every route of gateway/asgi.py is described here.
"""

from __future__ import annotations

from typing import Any

TAG = "OpenAI-compatible (/v1)"
SECURITY_SCHEME = "ApiKey"

_ERROR_REF = {"$ref": "#/components/schemas/OpenAIError"}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def _errors(*statuses: int) -> dict[str, Any]:
    words = {
        400: "Malformed JSON, a missing or mistyped field, or n / best_of above 1",
        401: "A missing, unknown, revoked or expired key (answered before the body is read)",
        403: "The model is not served to the key's tier (model_not_available_for_tier), or the key's tier or "
             "account does not allow it (model_not_allowed)",
        404: "Unknown model",
        405: "Wrong method",
        408: "The body did not arrive in time",
        413: "The body is larger than the limit (GP_MAX_BODY_BYTES)",
        429: "A queue limit of the key's tier; see Retry-After",
        502: "The engine is unreachable, failed or answered garbage",
        503: "No healthy replica serves the model, or the gateway's store is unavailable",
        504: "The engine timed out",
    }
    return {str(status): _error(words[status]) for status in statuses}


_SAMPLING = {
    "temperature": {"type": ["number", "null"]},
    "top_p": {"type": ["number", "null"]},
    "presence_penalty": {"type": ["number", "null"]},
    "frequency_penalty": {"type": ["number", "null"]},
    "seed": {"type": ["integer", "null"]},
    "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    "max_tokens": {"type": ["integer", "null"], "minimum": 1},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 1,
          "description": "One sequence per request: above 1 is refused (400 unsupported_value)."},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"],
                       "properties": {"include_usage": {"type": "boolean"}}},
}

_TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "maxItems": 1000}]}
_RERANK_REQUEST = {
    "type": "object", "required": ["model", "query", "documents"],
    "properties": {"model": {"type": "string"}, "query": {"type": "string"}, "documents": _TEXTS,
                   "top_n": {"type": ["integer", "null"], "minimum": 0}},
}

_SCORING_WORDS = ("vLLM's scoring API for a pooling model (an embedding model, or a cross-encoder replica of kind "
                  "`reranker`): queued fairly by the key's tier like a chat, its texts run together in one slot (at "
                  "most 1,000 of them), charged their prompt tokens. A chat model is refused (400 wrong_model_kind).")
_TOKENIZER_WORDS = ("vLLM's tokenizer, on a healthy replica of the model: no engine slot is held and nothing queues "
                    "or is charged; a requests-per-minute limit of the key's tier still counts it.")


def _anthropic_errors(*statuses: int) -> dict[str, Any]:
    """The errors of the Messages routes, in Anthropic's shape (gateway/anthropic_shape.py)."""
    schema = {
        "type": "object", "required": ["type", "error"],
        "properties": {"type": {"type": "string", "enum": ["error"]},
                       "error": {"type": "object", "required": ["type", "message"],
                                 "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}},
    }
    return {status: {"description": answer["description"], "content": {"application/json": {"schema": schema}}}
            for status, answer in _errors(*statuses).items()}


def _json_post(operation: str, summary: str, description: str, schema: dict[str, Any], *errors: int) -> dict[str, Any]:
    """A POST that takes a JSON body and answers the engine's JSON."""
    return {
        "tags": [TAG], "operationId": operation, "summary": summary, "description": description,
        "security": _SECURED,
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "responses": {
            "200": {"description": "The engine's answer",
                    "content": {"application/json": {"schema": {"type": "object"}}}},
            **_errors(*errors),
        },
    }


_GENERATION_RESPONSES = {
    "200": {
        "description": "The engine's answer: JSON, or server-sent events when `stream` is true. "
                       "`X-GPUPortal-Replica` names the replica, `X-GPUPortal-Queued-Ms` the time queued.",
        "content": {"application/json": {"schema": {"type": "object"}},
                    "text/event-stream": {"schema": {"type": "string"}}},
    },
    **_errors(400, 401, 403, 404, 408, 413, 429, 502, 503, 504),
}

_MODEL = {
    "type": "object",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string", "example": "qwen3-8b"},
        "object": {"type": "string", "enum": ["model"]},
        "created": {"type": "integer"},
        "owned_by": {"type": "string", "example": "gpuportal"},
        "kind": {"type": "string", "enum": ["chat", "embedding"],
                 "description": "chat: /v1/chat/completions and /v1/completions; embedding: /v1/embeddings."},
        "max_model_len": {"type": "integer", "description": "The context its engines state, once one has."},
    },
}

COMPONENTS: dict[str, Any] = {
    "securitySchemes": {
        SECURITY_SCHEME: {"type": "http", "scheme": "bearer", "description": "An API key, `gp-…`."},
    },
    "schemas": {
        "OpenAIError": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string", "example": "invalid_request_error"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
            }},
        },
        "Model": _MODEL,
        "ChatCompletionRequest": {
            "type": "object",
            "required": ["model", "messages"],
            "additionalProperties": True,
            "properties": {
                "model": {"type": "string"},
                "messages": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
                }},
                **_SAMPLING,
            },
            "example": {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 32},
        },
        "CompletionRequest": {
            "type": "object",
            "required": ["model", "prompt"],
            "additionalProperties": True,
            "properties": {
                "model": {"type": "string"},
                "prompt": {"description": "One prompt: a string or a list of token ids.",
                           "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]},
                **_SAMPLING,
            },
            "example": {"model": "demo", "prompt": "Once upon a time", "max_tokens": 32},
        },
        "EmbeddingRequest": {
            "type": "object",
            "required": ["model", "input"],
            "additionalProperties": True,
            "properties": {
                "model": {"type": "string"},
                "input": {"description": "A string, up to 2,048 strings, a list of token ids, or lists of them.",
                          "oneOf": [{"type": "string"}, {"type": "array", "minItems": 1, "maxItems": 2048}]},
                "encoding_format": {"type": "string", "enum": ["float", "base64"]},
                "dimensions": {"type": "integer", "minimum": 1},
                "user": {"type": "string"},
            },
            "example": {"model": "demo-embed", "input": ["The first passage.", "The second."]},
        },
    },
}

_SECURED: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []}]

PATHS: dict[str, Any] = {
    "/v1/chat/completions": {"post": {
        "tags": [TAG], "operationId": "v1_chat_completions", "summary": "Create a chat completion",
        "description": "Queued fairly by the key's tier, then forwarded to a replica serving the model.",
        "security": _SECURED,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ChatCompletionRequest"}}}},
        "responses": _GENERATION_RESPONSES,
    }},
    "/v1/completions": {"post": {
        "tags": [TAG], "operationId": "v1_completions", "summary": "Create a completion",
        "description": "Queued fairly by the key's tier, then forwarded to a replica serving the model.",
        "security": _SECURED,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/CompletionRequest"}}}},
        "responses": _GENERATION_RESPONSES,
    }},
    "/v1/embeddings": {"post": {
        "tags": [TAG], "operationId": "v1_embeddings", "summary": "Create embeddings",
        "description": "Queued fairly by the key's tier like a chat, then forwarded to a replica serving the "
                       "embedding model; charged its prompt tokens. A chat model is refused (400 wrong_model_kind).",
        "security": _SECURED,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/EmbeddingRequest"}}}},
        "responses": {
            "200": {"description": "The engine's answer. `X-GPUPortal-Replica` names the replica, "
                                   "`X-GPUPortal-Queued-Ms` the time queued.",
                    "content": {"application/json": {"schema": {"type": "object"}}}},
            **_errors(400, 401, 403, 404, 408, 413, 429, 502, 503, 504),
        },
    }},
    "/v1/responses": {"post": {
        "tags": [TAG], "operationId": "v1_responses", "summary": "Create a response (the Responses API)",
        "description": "OpenAI's Responses API as vLLM serves it for a chat model: queued fairly by the key's tier "
                       "like a chat, charged its input and output tokens. A turn naming `previous_response_id` "
                       "runs on the replica that stored that response (404 response_not_found when it is not "
                       "this person's, or that replica no longer serves; 503 stored_replica_unavailable while it "
                       "is down). `background` is refused.",
        "security": _SECURED,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["model", "input"],
            "properties": {
                "model": {"type": "string"},
                "input": {"oneOf": [{"type": "string", "minLength": 1},
                                    {"type": "array", "minItems": 1, "items": {"type": "object"}}]},
                "instructions": {"type": ["string", "null"]},
                "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
                "previous_response_id": {"type": ["string", "null"]},
                "store": {"type": ["boolean", "null"]},
                "stream": {"type": ["boolean", "null"]},
                "background": {"type": ["boolean", "null"], "enum": [False, None]},
                "temperature": {"type": ["number", "null"]},
                "top_p": {"type": ["number", "null"]},
            },
        }}}},
        "responses": {**_GENERATION_RESPONSES, **_errors(400, 401, 403, 404, 408, 413, 429, 502, 503, 504)},
    }},
    "/v1/responses/{response_id}": {
        "get": {
            "tags": [TAG], "operationId": "v1_responses_retrieve", "summary": "A stored response (its maker's only)",
            "security": _SECURED,
            "parameters": [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {
                "200": {"description": "The response, as the replica that stored it holds it",
                        "content": {"application/json": {"schema": {"type": "object"}}}},
                **_errors(401, 404, 405, 502),
            },
        },
        "delete": {
            "tags": [TAG], "operationId": "v1_responses_delete",
            "summary": "Forget a stored response (its maker's only); the engine's memory holds it until it restarts",
            "security": _SECURED,
            "parameters": [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {
                "200": {"description": "Deleted", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["id", "object", "deleted"],
                    "properties": {"id": {"type": "string"}, "object": {"type": "string", "enum": ["response"]},
                                   "deleted": {"type": "boolean"}}}}}},
                **_errors(401, 404, 405),
            },
        },
    },
    "/v1/messages": {"post": {
        "tags": [TAG], "operationId": "v1_messages", "summary": "Create a message (Anthropic's Messages API)",
        "description": "Anthropic's Messages API as vLLM serves it for a chat model: queued fairly by the key's "
                       "tier like a chat, charged its prompt and output tokens. The key may come in `x-api-key`. "
                       "Errors on this route are in Anthropic's shape: {\"type\": \"error\", \"error\": "
                       "{\"type\", \"message\"}}.",
        "security": _SECURED,
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["model", "messages", "max_tokens"],
            "properties": {
                "model": {"type": "string"},
                "messages": {"type": "array", "minItems": 1, "items": {"type": "object"}},
                "max_tokens": {"type": "integer", "minimum": 1},
                "system": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
                "stream": {"type": ["boolean", "null"]},
                "temperature": {"type": ["number", "null"]},
                "top_p": {"type": ["number", "null"]},
                "top_k": {"type": ["integer", "null"]},
            },
        }}}},
        "responses": {
            "200": {"description": "The engine's message: JSON, or Anthropic's named server-sent events when "
                                   "`stream` is true.",
                    "content": {"application/json": {"schema": {"type": "object"}},
                                "text/event-stream": {"schema": {"type": "string"}}}},
            **_anthropic_errors(400, 401, 403, 404, 408, 413, 429, 502, 503, 504),
        },
    }},
    **{path: {"post": _json_post(operation, summary, _SCORING_WORDS, schema, 400, 401, 403, 404, 408, 413, 429, 502,
                                 503, 504)}
       for path, operation, summary, schema in (
        ("/v1/rerank", "v1_rerank", "Rerank documents against a query (Jina's shape)", _RERANK_REQUEST),
        ("/v2/rerank", "v2_rerank", "Rerank documents against a query (Cohere's shape)", _RERANK_REQUEST),
        ("/v1/score", "v1_score", "Score pairs of texts", {
            "type": "object", "required": ["model"],
            "properties": {"model": {"type": "string"}, "text_1": _TEXTS, "text_2": _TEXTS,
                           "queries": _TEXTS, "documents": _TEXTS},
        }),
    )},
    **{path: {"post": _json_post(operation, summary, _TOKENIZER_WORDS, schema, 400, 401, 403, 404, 405, 429, 502, 503)}
       for path, operation, summary, schema in (
        ("/tokenize", "tokenize", "Count a prompt's tokens (a text or a chat's messages)", {
            "type": "object", "required": ["model"],
            "properties": {"model": {"type": "string"}, "prompt": {"type": "string"},
                           "messages": {"type": "array", "items": {"type": "object"}}},
        }),
        ("/detokenize", "detokenize", "Turn token ids back into text", {
            "type": "object", "required": ["model", "tokens"],
            "properties": {"model": {"type": "string"}, "tokens": {"type": "array", "items": {"type": "integer"}}},
        }),
    )},
    "/v1/messages/count_tokens": {"post": {
        **_json_post("v1_messages_count_tokens", "Count the prompt tokens of a Messages request (Anthropic's shape)",
                     _TOKENIZER_WORDS + " Errors are in Anthropic's shape.", {
                         "type": "object", "required": ["model", "messages"],
                         "properties": {"model": {"type": "string"}, "messages": {"type": "array", "minItems": 1},
                                        "system": {"oneOf": [{"type": "string"}, {"type": "array"}]}},
                     }),
        "responses": {
            "200": {"description": "The prompt's tokens", "content": {"application/json": {"schema": {
                "type": "object", "required": ["input_tokens"], "properties": {"input_tokens": {"type": "integer"}},
            }}}},
            **_anthropic_errors(400, 401, 403, 404, 405, 429, 502, 503),
        },
    }},
    "/v1/models": {"get": {
        "tags": [TAG], "operationId": "v1_models_list", "summary": "List the models the key may use",
        "security": _SECURED,
        "responses": {
            "200": {"description": "The models", "content": {"application/json": {"schema": {
                "type": "object",
                "properties": {"object": {"type": "string", "enum": ["list"]},
                               "data": {"type": "array", "items": {"$ref": "#/components/schemas/Model"}}},
            }}}},
            **_errors(401, 405),
        },
    }},
    "/v1/queue": {"get": {
        "tags": [TAG], "operationId": "v1_queue",
        "summary": "Where your waiting requests stand (a gpuportal extension)",
        "description": "For each model the key may use: the calling person's requests waiting for it (across "
        "their keys), each with its place (how many of those waiting now go first) and the wait estimate; how "
        "many wait for it in all; and how long a new request of theirs would wait now. A wait beyond the "
        "estimator's horizon (an hour) is null. Answers are kept for a second per key.",
        "security": _SECURED,
        "responses": {
            "200": {"description": "The calling person's place in each model's queue", "content": {
                "application/json": {"schema": {
                    "type": "object", "required": ["object", "requests", "models"],
                    "properties": {
                        "object": {"type": "string", "enum": ["queue"]},
                        "requests": {"type": "array", "items": {
                            "type": "object",
                            "required": ["id", "model", "tier", "position", "waited_ms", "estimated_wait_ms"],
                            "properties": {
                                "id": {"type": "string", "description": "The request's id (its X-Request-Id)."},
                                "model": {"type": "string"}, "tier": {"type": "string"},
                                "position": {"type": "integer", "minimum": 0},
                                "waited_ms": {"type": "integer", "minimum": 0},
                                "estimated_wait_ms": {"type": ["integer", "null"], "minimum": 0},
                            },
                        }},
                        "models": {"type": "array", "items": {
                            "type": "object", "required": ["model", "waiting", "new_request_wait_ms"],
                            "properties": {
                                "model": {"type": "string"}, "waiting": {"type": "integer", "minimum": 0},
                                "new_request_wait_ms": {"type": ["integer", "null"], "minimum": 0},
                            },
                        }},
                    },
                }},
            }},
            **_errors(401, 403, 405),
        },
    }},
    "/v1/models/{model}": {"get": {
        "tags": [TAG], "operationId": "v1_models_retrieve", "summary": "One model the key may use",
        "security": _SECURED,
        "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string"},
                        "description": "The model's id; it may hold a slash (org/name)."}],
        "responses": {
            "200": {"description": "The model",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Model"}}}},
            **_errors(401, 404, 405),
        },
    }},
}


def merge(schema: dict[str, Any], paths: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """`schema` (an OpenAPI document) with `paths` and `components` added."""
    schema.setdefault("paths", {}).update(paths)
    sections = schema.setdefault("components", {})
    for section, entries in components.items():
        sections.setdefault(section, {}).update(entries)
    return schema


def merge_into(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the gateway's /v1/ paths and their components added."""
    return merge(schema, PATHS, COMPONENTS)
