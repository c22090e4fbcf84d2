"""The error answers every operation can give, added to the OpenAPI schema so
clients (and the fuzzing test) know them: 400 names what to fix, 401/403 for
missing or insufficient credentials, 404 for an id that is not yours, 409 when
the story's state does not allow the change, 413 for a body over the limit,
424 when the model endpoint fails, 429 with Retry-After when a rate limit is
hit. Request texts (body fields, path and query parameters) get the pattern they
are checked by: no NUL, and a non-space character when required; a request object
that names its fields takes no other (config.serializer_fields.valid refuses a field
it does not declare, at any depth)."""

from __future__ import annotations

ERROR_SCHEMA = {
    "type": "object",
    "description": "`detail` says what went wrong; a 400 may instead name each field with its problems; "
    "a model failure (424) adds an `error` code.",
    "properties": {"detail": {"type": "string"}, "error": {"type": "string"}},
    "additionalProperties": True,
}

# Operations that call the user's model endpoint (or the demo model).
MODEL_CALLS = ("/turns/", "/retry/", "/settings/test/", "/settings/models/", "/regenerate/", "/memories/run/")
# Documents described by a part of them: other sites' files (the fields they carry beside ours are passed
# over) and our own export (the rest of it is what GET .../export/ gives, checked whole when imported).
OPEN_DOCUMENTS = ("AIDungeonCardsRequest", "AIDungeonCardRequest", "AdventureImportRequest")
# Request bodies whose every field may be left out, but not all of them (their serializer's validate says so).
AT_LEAST_ONE_FIELD = ("Patched_ClaimEditRequest",)

DESCRIPTIONS = {
    "400": "The request is invalid; the answer says what to fix.",
    "401": "No valid credentials were sent (or the account is suspended).",
    "403": "The credentials do not allow this.",
    "404": "No such object among yours.",
    "409": "The current state does not allow this now: the story's, or a world that is full (the answer says why).",
    "413": "The request body is over the limit.",
    "424": "The model endpoint failed; `error` says how (bad_key, unreachable, timeout, refused, ...).",
    "429": "A rate limit or quota was hit; wait for Retry-After seconds.",
}


# A server-sent event as a client reads it: the stream's schema describes each event (as OpenAPI before
# 3.2 does; the events each route sends, and their data, are in its description).
SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string", "description": "the event's name (see the description)"},
        "data": {"type": "string", "description": "one line of JSON", "contentMediaType": "application/json"},
        "id": {"type": "string", "description": "send it back as Last-Event-ID to go on after it"},
        "retry": {"type": "integer", "description": "milliseconds to wait before reconnecting"},
    },
}


# Text Postgres can store has no NUL (config.input_guard refuses it with a 400); a
# required text also needs a character that is not white space (texts are trimmed).
TEXT = r"^[^\u0000]*$"
NON_BLANK_TEXT = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"

# Any JSON value whose texts and keys hold no NUL, at any depth (config.input_guard refuses one): what a
# free-form part of a request may hold.
JSON_TEXT = {
    "description": "any JSON value; no text or key in it holds NUL",
    "nullable": True,
    "anyOf": [
        {"type": "string", "pattern": TEXT},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonText"}},
        {
            "type": "object",
            "propertyNames": {"pattern": TEXT},
            "additionalProperties": {"$ref": "#/components/schemas/JsonText"},
        },
    ],
}
FREE = {"$ref": "#/components/schemas/JsonText"}


def _text_rules(schema) -> None:
    """Give every free text of a request the pattern it is checked against."""
    if isinstance(schema, list):
        for item in schema:
            _text_rules(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and not {"pattern", "enum", "format"} & schema.keys():
        schema["pattern"] = NON_BLANK_TEXT if schema.get("minLength", 0) >= 1 else TEXT
    if schema.get("type") == "object" and "properties" in schema:
        schema.setdefault("additionalProperties", False)
    if schema.get("type") == "object" and schema.get("additionalProperties") not in (None, False):
        schema.setdefault("propertyNames", {"pattern": TEXT})
        if schema["additionalProperties"] in (True, {}):
            schema["additionalProperties"] = FREE
    for value in schema.get("properties", {}).values():
        _text_rules(value)
    for key in ("items", "oneOf", "anyOf", "allOf", "additionalProperties"):
        if isinstance(schema.get(key), (dict, list)):
            _text_rules(schema[key])


def _must_name_something(schema, components) -> bool:
    """Whether a body of ``schema`` must hold at least one field (then the body itself is required)."""
    if "$ref" in schema:
        schema = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
    if "oneOf" in schema:
        return all(_must_name_something(s, components) for s in schema["oneOf"])
    return bool(schema.get("required")) or schema.get("minProperties", 0) >= 1


def add_error_responses(result, generator, request, public):
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    components["JsonText"] = JSON_TEXT
    for name, component in components.items():
        if name in OPEN_DOCUMENTS:
            component["additionalProperties"] = True
        if name.endswith("Request"):
            _text_rules(component)
        if name in AT_LEAST_ONE_FIELD:
            component["minProperties"] = 1
    ref = {"$ref": "#/components/schemas/Error"}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            for parameter in operation.get("parameters", []):
                _text_rules(parameter.get("schema"))
            body = operation.get("requestBody", {})
            for media in body.get("content", {}).values():
                _text_rules(media.get("schema"))
                if _must_name_something(media.get("schema") or {}, components):
                    body["required"] = True
            for answer in operation.get("responses", {}).values():
                if "text/event-stream" in answer.get("content", {}):
                    answer["content"]["text/event-stream"]["schema"] = SSE_EVENT
            codes = ["400", "401", "403", "429"]
            if "{" in path:
                codes.append("404")
                if method != "get":
                    codes.append("409")
            if method in {"post", "put", "patch"}:
                codes.append("413")
            if method == "post" and any(path.endswith(suffix) for suffix in MODEL_CALLS):
                codes.append("424")
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(
                    code,
                    {
                        "description": DESCRIPTIONS[code],
                        "content": {"application/json": {"schema": ref}},
                        **(
                            {
                                "headers": {
                                    "Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}
                                }
                            }
                            if code == "429"
                            else {}
                        ),
                    },
                )
    return result
