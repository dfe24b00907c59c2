"""/api/docs: one OpenAPI document for the JSON API and the gateway's /v1/ endpoints, its Swagger
UI from our own static files (tests/portal_live/test_csp_browser.py draws it in a browser, offline)."""

import re

from django.test import Client

from fairness.batch.routes import streamed_routes
from fairness.gateway import asgi


def test_the_openapi_document_describes_every_v1_route_with_its_key():
    document = Client().get("/api/openapi.json").json()
    documented = set(document["paths"])
    parameters = {"/v1/models/": "{model}", "/v1/responses/": "{response_id}"}
    assert set(asgi.PREFIX_ROUTES) == set(parameters)
    routes = set(asgi.ROUTES) | {prefix + parameters[prefix] for prefix in asgi.PREFIX_ROUTES}
    batch = set(streamed_routes())  # "/v1/files", and the prefix "/v1/files/" of one file's paths; batches alike
    assert batch == {"/v1/files", "/v1/files/", "/v1/batches", "/v1/batches/"}
    routes |= {path for path in batch if not path.endswith("/")}
    routes |= {"/v1/files/{file_id}", "/v1/files/{file_id}/content", "/v1/batches/{batch_id}",
               "/v1/batches/{batch_id}/cancel"}
    assert routes <= documented, routes - documented
    assert any(path.startswith("/api/") for path in documented)  # the JSON API is still there
    for path in routes:
        for operation in document["paths"][path].values():
            assert operation["security"] == [{"ApiKey": []}]
            assert "401" in operation["responses"]
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"


def test_the_docs_page_loads_swagger_ui_from_our_static_files():
    page = Client().get("/api/docs").content.decode()
    sources = re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="([^"]+)"', page)
    assert any("swagger-ui-bundle" in source for source in sources)
    assert all(source.startswith("/static/") for source in sources), sources


def test_the_docs_page_says_what_it_is_in_which_language_and_leads_home():
    page = Client().get("/api/docs").content.decode()
    assert '<html lang="en">' in page
    assert "<title>gpuportal API: reference</title>" in page
    assert re.search(r'<header[^>]*>.*<a href="/">', page, re.DOTALL)  # the way back to the portal
    assert '<main id="swagger-ui">' in page  # Swagger UI draws inside the main landmark
