"""Bad uploads get a clear OpenAI-shaped 400 and leave nothing in storage; nothing 500s."""

from __future__ import annotations

import httpx
import pytest

from fairness.models import BatchFile
from tests.support.batch_files import files_on_disk, jsonl


def upload(gateway, secret: str, content: bytes, *, purpose: str | None = "batch", filename: str = "in.jsonl",
           **kwargs) -> httpx.Response:
    data = {"purpose": purpose} if purpose is not None else {}
    return httpx.post(
        gateway.url + "/v1/files", headers={"authorization": f"Bearer {secret}"}, data=data,
        files={"file": (filename, content, "application/jsonl")}, timeout=60, **kwargs,
    )


def raw_post(gateway, secret: str, body: bytes, content_type: str) -> httpx.Response:
    return httpx.post(gateway.url + "/v1/files", content=body, timeout=30,
                      headers={"authorization": f"Bearer {secret}", "content-type": content_type})


def assert_refused(response: httpx.Response, status: int, code: str, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert error["type"] == "invalid_request_error" and error["param"] == param
    return error


@pytest.fixture
def alice(gateway, cast):
    return cast["alice"].secret


def test_a_purpose_other_than_batch_is_refused(gateway, alice, stored_files):
    error = assert_refused(upload(gateway, alice, jsonl(), purpose="fine-tune"), 400, "invalid_value", "purpose")
    assert "'batch'" in error["message"]
    assert_refused(upload(gateway, alice, jsonl(), purpose=None), 400, "missing_required_parameter", "purpose")
    assert files_on_disk(stored_files) == []


def test_a_form_without_a_file_part_is_refused(gateway, alice):
    response = httpx.post(gateway.url + "/v1/files", headers={"authorization": f"Bearer {alice}"},
                          data={"purpose": "batch"}, files={"other": ("x.jsonl", jsonl())})
    assert_refused(response, 400, "missing_required_parameter", "file")


FORM = "multipart/form-data; boundary=b"
FILE_PART = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n'
FIELD_PART = b'--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n\r\n'


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"purpose": "batch"}', "application/json"),
        (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--b--\r\n', "multipart/form-data"),
        (b"no boundary anywhere" * 10, FORM),
        (FILE_PART + b"\r\n{}\n", FORM),
        (b"--b\r\nno colon here\r\n\r\n{}\r\n--b--\r\n", FORM),
        (b"--b\r\nContent-Type: text/plain\r\n\r\n{}\r\n--b--\r\n", FORM),
        (FILE_PART + b"X-Pad: y\r\n" * 3000, FORM),
        (b"--bjunk\r\n", FORM),
        (FIELD_PART * 9 + FILE_PART + b"\r\n{}\r\n--b--\r\n", FORM),
        (FILE_PART + b"X-Pad: " + b"y" * 17 * 1024 + b"\r\n\r\n{}\r\n--b--\r\n", FORM),
        (FILE_PART + (b"X-Pad: " + b"y" * 1500 + b"\r\n") * 3 + b"\r\n{}\r\n--b--\r\n", FORM),
    ],
    ids=["json", "no-boundary-param", "no-boundary-in-body", "ends-early", "bad-header", "no-disposition",
         "endless-headers", "bad-boundary-line", "too-many-parts", "17-kib-header", "headers-past-4-kib"],
)
def test_malformed_multipart_is_refused(gateway, alice, stored_files, body, content_type):
    response = raw_post(gateway, alice, body, content_type)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_multipart"
    assert files_on_disk(stored_files) == []


def test_a_path_in_the_filename_is_dropped_and_never_reaches_the_disk(gateway, alice, stored_files):
    response = upload(gateway, alice, jsonl(), filename="../../etc/passwd")
    assert response.status_code == 200, response.text
    assert response.json()["filename"] == "passwd"
    [stored] = files_on_disk(stored_files)
    assert stored.is_relative_to(stored_files) and "passwd" not in str(stored)
    windows = upload(gateway, alice, jsonl(), filename="..\\..\\boot.ini")
    assert windows.json()["filename"] == "boot.ini"
    assert upload(gateway, alice, jsonl(), filename="..").json()["filename"] == "upload.jsonl"


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe{\x00}\x00\n", jsonl(2) + b"\xc3\x28\n", jsonl(1) + b"\xe2\x82", b"", b"a,b,c\n1,2,3\n",
     b'{\n  "custom_id": "pretty"\n}\n', b'[{"custom_id": "x"}]\n', jsonl(1) + b"\x00\n"],
    ids=["utf16", "bad-byte-later", "cut-character", "empty", "csv", "pretty-json", "array", "nul"],
)
def test_what_is_not_jsonl_text_is_refused(gateway, alice, stored_files, content):
    assert_refused(upload(gateway, alice, content), 400, "invalid_file_format", "file")
    assert files_on_disk(stored_files) == []
    assert not BatchFile.objects.exists()


def test_two_file_parts_are_refused(gateway, alice, stored_files):
    response = httpx.post(gateway.url + "/v1/files", headers={"authorization": f"Bearer {alice}"},
                          data={"purpose": "batch"},
                          files=[("file", ("a.jsonl", jsonl())), ("file", ("b.jsonl", jsonl()))])
    assert_refused(response, 400, "invalid_request", "file")
    assert files_on_disk(stored_files) == []


def test_wrong_methods_and_paths_are_refused(gateway, alice):
    headers = {"authorization": f"Bearer {alice}"}
    assert httpx.put(gateway.url + "/v1/files", headers=headers).status_code == 405
    assert httpx.post(gateway.url + "/v1/files/file-x", headers=headers).status_code == 405
    assert httpx.delete(gateway.url + "/v1/files/file-x/content", headers=headers).status_code == 405
    assert httpx.get(gateway.url + "/v1/files/file-x/elsewhere", headers=headers).status_code == 404


def test_a_purpose_sent_after_the_file_is_read_and_checked_too(gateway, alice, stored_files):
    def form(purpose: bytes) -> bytes:
        return (FILE_PART + b"\r\n" + jsonl() + b"\r\n--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                + purpose + b"\r\n--b--\r\n")

    assert_refused(raw_post(gateway, alice, form(b"assistants"), FORM), 400, "invalid_value", "purpose")
    assert files_on_disk(stored_files) == []
    response = raw_post(gateway, alice, form(b"batch"), FORM)
    assert response.status_code == 200 and response.json()["bytes"] == len(jsonl())


DEEP_LINE = b'{"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": ' + b"[" * 100_000 \
    + b"]" * 100_000 + b"}\n"


def huge_line() -> bytes:
    """100 MB in one line (made when a test needs it: a parameter is held for the whole session)."""
    return b'{"custom_id": "huge", "body": {"content": "' + b"x" * 100 * 1024 * 1024 + b'"}}\n'


@pytest.mark.parametrize(
    ("make_content", "line", "said"),
    [
        (lambda: DEEP_LINE + jsonl(1), 1, "nested more than 254 levels deep"),
        (lambda: huge_line() + jsonl(1), 1, "longer than 8 MiB (GP_BATCH_MAX_LINE_BYTES)"),
        (lambda: jsonl(1) + huge_line(), 2, "longer than 8 MiB (GP_BATCH_MAX_LINE_BYTES)"),
        (lambda: jsonl(1) + jsonl(1).replace(b'"hi"', b'"h\xff\xfei"') + jsonl(1), 2, "not UTF-8 text"),
        (lambda: b'"a request"\n' + jsonl(1), 1, "not a JSON object"),
    ],
    ids=["deep-first-line", "100-mb-first-line", "100-mb-second-line", "bad-utf-8-mid-line",
         "first-line-not-an-object"],
)
def test_a_line_no_request_could_be_is_refused_at_upload_naming_the_line(gateway, alice, stored_files, make_content,
                                                                         line, said):
    content = make_content()
    error = assert_refused(upload(gateway, alice, content), 400, "invalid_file_format", "file")
    assert error["message"].startswith(f"Line {line} of the file ") and said in error["message"], error["message"]
    assert files_on_disk(stored_files) == [] and not BatchFile.objects.exists()
