"""schemathesis hooks for the contract test (test_schemathesis.py loads this module through SCHEMATHESIS_HOOKS).

One hook, for one limit of schemathesis 4.x's ``negative_data_rejection`` on multipart forms: to decide
whether a "negative" form became valid on the wire (a number mutated into the text part ``path``
is sent as the text ``2.5``, a valid string), it validates the file parts' raw bytes as JSON, which
fails, so it reports the upload as accepting a schema-violating request. Here the form is
validated as the server reads it (text parts as strings, a file part as a binary string, which any
bytes are): a form that conforms as sent was rightly accepted, and only that failure is dropped.
schemathesis counts dropped failures in its summary.
"""

from __future__ import annotations

from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import schemathesis
from jsonschema import Draft202012Validator
from schemathesis.core.failures import AcceptedNegativeData, Failure
from schemathesis.core.transport import Response
from schemathesis.generation.case import Case
from schemathesis.hooks import HookContext

MULTIPART = "multipart/form-data"


def form_as_sent(response: Response) -> dict[str, str] | None:
    """The multipart form the request carried: text parts as text, file parts as "" (any bytes)."""
    content_type = response.request.headers.get("Content-Type", "")
    body = response.request.body
    if not content_type.startswith(MULTIPART) or not isinstance(body, bytes):
        return None
    message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    form: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(payload, bytes):
            return None
        form[name] = "" if part.get_filename() is not None else payload.decode(errors="replace")
    return form


def _resolved(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = document
        for step in schema["$ref"].removeprefix("#/").split("/"):
            target = target[step]
        schema = target
    return schema


@schemathesis.hook
def filter_failure(context: HookContext, failure: Failure, case: Case, response: Response) -> bool:
    """Keep every failure but an accepted multipart form that conforms to its schema as sent."""
    if not isinstance(failure, AcceptedNegativeData):
        return True
    form = form_as_sent(response)
    content = case.operation.definition.raw.get("requestBody", {}).get("content", {})
    if form is None or MULTIPART not in content:
        return True
    schema = _resolved(case.operation.schema.raw_schema, content[MULTIPART]["schema"])
    return not Draft202012Validator(schema).is_valid(form)
