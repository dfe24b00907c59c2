"""The batch lane's /v1/ endpoints in OpenAPI terms, merged by the portal into /api/docs beside
the gateway's (gateway/openapi.py, whose error schema and security scheme these share)."""

from __future__ import annotations

from typing import Any

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
                "purpose": {"type": "string", "enum": ["batch"]},
                "status": {"type": "string", "enum": ["processed"]},
                "status_details": {"type": ["string", "null"]},
                "expires_at": {"type": ["integer", "null"]},
            },
        },
    },
}

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
}


def merge_into(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the batch lane's paths and components added."""
    return merge(schema, PATHS, COMPONENTS)
