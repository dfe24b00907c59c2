"""The batch lane's /v1/ routes, which the ASGI entry (gpuportal/asgi.py) adds to the gateway's:
the gateway sits below this package and cannot name them itself."""

from __future__ import annotations

from django.conf import settings

from fairness.batch import batches_api, files_api
from fairness.gateway.streamed_body import StreamedRoute

# A form's framing around its file (boundaries, part headers, the purpose field), with room for a
# chunk of the server's: the file's own limit, checked as it streams, is the one a client meets.
FORM_ENVELOPE_BYTES = 1024 * 1024
BATCH_REQUEST_BYTES = 64 * 1024  # a batch's create request: ids, an endpoint and 16 metadata pairs


def streamed_routes() -> dict[str, StreamedRoute]:
    return {
        "/v1/files": StreamedRoute(files_api.files, settings.GP_MAX_BATCH_FILE_BYTES + FORM_ENVELOPE_BYTES),
        # Reads no body: GET and DELETE.
        "/v1/files/": StreamedRoute(files_api.one_file, settings.GP_MAX_BODY_BYTES),
        "/v1/batches": StreamedRoute(batches_api.batches, BATCH_REQUEST_BYTES),
        "/v1/batches/": StreamedRoute(batches_api.one_batch, BATCH_REQUEST_BYTES),
    }
