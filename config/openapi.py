"""The error answers every operation can give, added to the OpenAPI schema so
clients (and the fuzzing test) know them: 400 names what to fix, 401/403 for
missing or insufficient credentials, 404 for an id that is not yours, 409 when
the story's state does not allow the change, 413 for a body over the limit,
424 when the model endpoint fails, 429 with Retry-After when a rate limit is
hit. Request texts (body fields, path and query parameters) get the pattern they
are checked by: no NUL, and a non-space character when required."""

from __future__ import annotations

ERROR_SCHEMA = {
    "type": "object",
    "description": "`detail` says what went wrong; a 400 may instead name each field with its problems; "
    "a model failure (424) adds an `error` code.",
    "properties": {"detail": {"type": "string"}, "error": {"type": "string"}},
    "additionalProperties": True,
}

# Operations that call the user's model endpoint (or the demo model).
MODEL_CALLS = ("/turns/", "/retry/", "/settings/test/", "/regenerate/", "/memories/run/")

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


# Text Postgres can store has no NUL (config.input_guard refuses it with a 400); a
# required text also needs a character that is not white space (texts are trimmed).
TEXT = r"^[^\u0000]*$"
NON_BLANK_TEXT = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"


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
    if schema.get("type") == "object" and "additionalProperties" in schema:
        schema.setdefault("propertyNames", {"pattern": TEXT})
    for value in schema.get("properties", {}).values():
        _text_rules(value)
    for key in ("items", "oneOf", "anyOf", "allOf", "additionalProperties"):
        if key in schema:
            _text_rules(schema[key])


def add_error_responses(result, generator, request, public):
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    for name, component in components.items():
        if name.endswith("Request"):
            _text_rules(component)
    ref = {"$ref": "#/components/schemas/Error"}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            for parameter in operation.get("parameters", []):
                _text_rules(parameter.get("schema"))
            for media in operation.get("requestBody", {}).get("content", {}).values():
                _text_rules(media.get("schema"))
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
