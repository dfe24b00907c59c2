"""Copy the schemas of OpenAI's bodies the portal writes or relays, with every schema they refer
to, out of OpenAI's published OpenAPI document (github.com/openai/openai-openapi, MIT licence)
into tests/fixtures/openai_schemas.json, where tests/support/openai_spec.py checks bodies against
them. Run: python scripts/vendor_openai_schemas.py <openapi.json> <commit>"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOTS = ("Batch", "ListBatchesResponse", "OpenAIFile", "ListFilesResponse", "DeleteFileResponse", "Model",
         "ListModelsResponse", "ErrorResponse", "CreateEmbeddingResponse", "CreateChatCompletionResponse",
         "CreateChatCompletionStreamResponse", "CreateCompletionResponse")
TARGET = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "openai_schemas.json"


def referred(node: Any, schemas: dict[str, Any], found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref", "")
        if ref.startswith("#/components/schemas/") and (name := ref.rsplit("/", 1)[1]) not in found:
            found.add(name)
            referred(schemas[name], schemas, found)
        for value in node.values():
            referred(value, schemas, found)
    elif isinstance(node, list):
        for value in node:
            referred(value, schemas, found)


def nullable_as_null(node: Any) -> Any:
    """The document is OpenAPI 3.1 (JSON Schema), yet a few of its schemas still say OpenAPI 3.0's
    `nullable: true`, which JSON Schema ignores: say it as 3.1 does, with null among the types."""
    if isinstance(node, list):
        return [nullable_as_null(value) for value in node]
    if not isinstance(node, dict):
        return node
    node = {name: nullable_as_null(value) for name, value in node.items()}
    if node.pop("nullable", False):
        if isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        if "enum" in node:
            node["enum"] = [*node["enum"], None]
    return node


def main(source: str, commit: str) -> None:
    schemas = nullable_as_null(json.loads(Path(source).read_text())["components"]["schemas"])
    found = set(ROOTS)
    for root in ROOTS:
        referred(schemas[root], schemas, found)
    TARGET.write_text(json.dumps({
        "x-source": f"github.com/openai/openai-openapi openapi.json at {commit} (MIT licence, (c) OpenAI)",
        "components": {"schemas": {name: schemas[name] for name in sorted(found)}},
    }, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
