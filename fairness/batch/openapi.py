"""The batch lane's /v1/ endpoints in OpenAPI terms, merged by the portal into /api/docs beside
the gateway's (gateway/openapi.py, whose error schema and security scheme these share)."""

from __future__ import annotations

from typing import Any

from fairness.batch.batches_api import ENDPOINTS
from fairness.gateway.openapi import SECURITY_SCHEME, TAG, merge

_SECURED: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []}]
_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIError"}}}
_FILE_REF = {"$ref": "#/components/schemas/File"}


def _errors(**words: str) -> dict[str, Any]:
    """{"401": ..., ...} from status_401="words"."""
    return {name.removeprefix("status_"): {"description": text, "content": _ERROR} for name, text in words.items()}


_UNKNOWN_KEY = "A missing, unknown, revoked or expired key (answered before the body is read)"
_NOT_YOURS = "No file of the key's owner has this id (another person's file is not found either)"
_FILE_ID = [{"name": "file_id", "in": "path", "required": True, "schema": {"type": "string"},
             "example": "file-abc123"}]

COMPONENTS: dict[str, Any] = {
    "schemas": {
        "File": {
            "type": "object",
            "required": ["id", "object", "bytes", "created_at", "filename", "purpose"],
            "properties": {
                "id": {"type": "string", "example": "file-abc123"},
                "object": {"type": "string", "enum": ["file"]},
                "bytes": {"type": "integer"},
                "created_at": {"type": "integer"},
                "filename": {"type": "string"},
                "purpose": {"type": "string", "enum": ["batch", "batch_output"]},
                "status": {"type": "string", "enum": ["processed"]},
                "expires_at": {"type": "integer"},
            },
        },
        "Batch": {
            "type": "object",
            "required": ["id", "object", "endpoint", "input_file_id", "completion_window", "status", "created_at",
                         "request_counts"],
            "properties": {
                "id": {"type": "string", "example": "batch_abc123"},
                "object": {"type": "string", "enum": ["batch"]},
                "endpoint": {"type": "string", "enum": list(ENDPOINTS)},
                "errors": {"type": "object"},
                "input_file_id": {"type": "string"},
                "completion_window": {"type": "string", "enum": ["24h"]},
                "status": {"type": "string", "enum": ["validating", "failed", "in_progress", "finalizing",
                                                      "completed", "expired", "cancelling", "cancelled"]},
                "output_file_id": {"type": "string"},
                "error_file_id": {"type": "string"},
                **{f"{moment}_at": {"type": "integer"} for moment in (
                    "created", "in_progress", "expires", "finalizing", "completed", "failed", "expired",
                    "cancelling", "cancelled")},
                "request_counts": {"type": "object", "properties": {
                    "total": {"type": "integer"}, "completed": {"type": "integer"}, "failed": {"type": "integer"}}},
                "metadata": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
            },
        },
    },
}

_BATCH_REF = {"$ref": "#/components/schemas/Batch"}
_BATCH_ID = [{"name": "batch_id", "in": "path", "required": True, "schema": {"type": "string"},
              "example": "batch_abc123"}]
_NO_BATCH = "No batch of the key's owner has this id (another person's batch is not found either)"
_ONE_BATCH = {"200": {"description": "The batch", "content": {"application/json": {"schema": _BATCH_REF}}}}

PATHS: dict[str, Any] = {
    "/v1/files": {
        "post": {
            "tags": [TAG], "operationId": "v1_files_create", "summary": "Upload a batch input file",
            "description": "JSONL, one request per line; streamed to storage as it arrives, up to "
                           "GP_MAX_BATCH_FILE_BYTES. The file belongs to the key's owner.",
            "security": _SECURED,
            "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
                "type": "object", "required": ["file", "purpose"],
                "properties": {"file": {"type": "string", "format": "binary"},
                               "purpose": {"type": "string", "enum": ["batch"]}},
            }}}},
            "responses": {
                "200": {"description": "The stored file", "content": {"application/json": {"schema": _FILE_REF}}},
                **_errors(status_400="Not JSONL text, a malformed form, or a missing or wrong purpose",
                          status_401=_UNKNOWN_KEY,
                          status_403="The owner keeps GP_MAX_BATCH_FILES_PER_USER files already",
                          status_408="The upload stalled", status_413="The file is over the size limit",
                          status_503="Storage is unavailable"),
            },
        },
        "get": {
            "tags": [TAG], "operationId": "v1_files_list", "summary": "List the owner's files",
            "security": _SECURED,
            "parameters": [
                {"name": "purpose", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 10000}},
                {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
                {"name": "after", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": {"description": "The files, newest first by default", "content": {"application/json": {
                    "schema": {"type": "object", "properties": {
                        "object": {"type": "string", "enum": ["list"]},
                        "data": {"type": "array", "items": _FILE_REF},
                        "first_id": {"type": ["string", "null"]}, "last_id": {"type": ["string", "null"]},
                        "has_more": {"type": "boolean"},
                    }}}}},
                **_errors(status_400="A bad limit, order or after", status_401=_UNKNOWN_KEY),
            },
        },
    },
    "/v1/files/{file_id}": {
        "get": {
            "tags": [TAG], "operationId": "v1_files_retrieve", "summary": "One of the owner's files",
            "security": _SECURED, "parameters": _FILE_ID,
            "responses": {"200": {"description": "The file", "content": {"application/json": {"schema": _FILE_REF}}},
                          **_errors(status_401=_UNKNOWN_KEY, status_404=_NOT_YOURS)},
        },
        "delete": {
            "tags": [TAG], "operationId": "v1_files_delete", "summary": "Delete one of the owner's files",
            "security": _SECURED, "parameters": _FILE_ID,
            "responses": {"200": {"description": "Deleted, with its content", "content": {"application/json": {
                "schema": {"type": "object", "properties": {"id": {"type": "string"},
                                                            "object": {"type": "string", "enum": ["file"]},
                                                            "deleted": {"type": "boolean"}}}}}},
                          **_errors(status_401=_UNKNOWN_KEY, status_404=_NOT_YOURS)},
        },
    },
    "/v1/files/{file_id}/content": {
        "get": {
            "tags": [TAG], "operationId": "v1_files_content", "summary": "The file's content, streamed",
            "security": _SECURED, "parameters": _FILE_ID,
            "responses": {"200": {"description": "The bytes as uploaded",
                                  "content": {"application/octet-stream": {"schema": {"type": "string",
                                                                                      "format": "binary"}}}},
                          **_errors(status_401=_UNKNOWN_KEY, status_404=_NOT_YOURS,
                                    status_503="Storage is unavailable")},
        },
    },
    "/v1/batches": {
        "post": {
            "tags": [TAG], "operationId": "v1_batches_create", "summary": "Start a batch",
            "description": "Runs each line of the input file through the same fair admission as a live request "
                           "from this key, into capacity others leave idle. Invalid lines, and lines naming a "
                           "model the key may not use, go to the error file; the rest run.",
            "security": _SECURED,
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "required": ["input_file_id", "endpoint", "completion_window"],
                "properties": {"input_file_id": {"type": "string"},
                               "endpoint": {"type": "string", "enum": list(ENDPOINTS)},
                               "completion_window": {"type": "string", "enum": ["24h"]},
                               "metadata": {"type": "object", "additionalProperties": {"type": "string"}}},
            }}}},
            "responses": {**_ONE_BATCH, **_errors(
                status_400="A missing or bad field, or an input file not meant for batches", status_401=_UNKNOWN_KEY,
                status_404="No file of the key's owner has this id",
                status_429="The owner has GP_MAX_UNFINISHED_BATCHES_PER_USER batches running")},
        },
        "get": {
            "tags": [TAG], "operationId": "v1_batches_list", "summary": "List the owner's batches, newest first",
            "security": _SECURED,
            "parameters": [
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
                {"name": "after", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {
                "200": {"description": "The batches", "content": {"application/json": {
                    "schema": {"type": "object", "properties": {
                        "object": {"type": "string", "enum": ["list"]},
                        "data": {"type": "array", "items": _BATCH_REF},
                        "first_id": {"type": ["string", "null"]}, "last_id": {"type": ["string", "null"]},
                        "has_more": {"type": "boolean"},
                    }}}}},
                **_errors(status_400="A bad limit or after", status_401=_UNKNOWN_KEY),
            },
        },
    },
    "/v1/batches/{batch_id}": {
        "get": {
            "tags": [TAG], "operationId": "v1_batches_retrieve", "summary": "One of the owner's batches",
            "security": _SECURED, "parameters": _BATCH_ID,
            "responses": {**_ONE_BATCH, **_errors(status_401=_UNKNOWN_KEY, status_404=_NO_BATCH)},
        },
    },
    "/v1/batches/{batch_id}/cancel": {
        "post": {
            "tags": [TAG], "operationId": "v1_batches_cancel", "summary": "Cancel a batch",
            "description": "Lines in flight are aborted, no new line starts; the batch ends cancelled with what "
                           "it finished in its output file.",
            "security": _SECURED, "parameters": _BATCH_ID,
            "responses": {**_ONE_BATCH, **_errors(status_401=_UNKNOWN_KEY, status_404=_NO_BATCH,
                                                  status_409="The batch has ended already")},
        },
    },
}


def merge_into(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the batch lane's paths and components added."""
    return merge(schema, PATHS, COMPONENTS)
