"""The error answers every operation can give, added to the OpenAPI schema so
clients (and the fuzzing test) know them: 400 names what to fix, 401/403 for
missing or insufficient credentials, 404 for an id that is not yours, 409 when
the story's state does not allow the change, 413 for a body over the limit,
424 when the model endpoint fails, 429 with Retry-After when a rate limit is
hit. Required text fields also get the non-blank pattern they are checked by."""

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
    "401": "No valid credentials were sent.",
    "403": "The credentials do not allow this (or the account is suspended).",
    "404": "No such object among yours.",
    "409": "The story's current state does not allow this now (the answer says why).",
    "413": "The request body is over the limit.",
    "424": "The model endpoint failed; `error` says how (bad_key, unreachable, timeout, refused, ...).",
    "429": "A rate limit or quota was hit; wait for Retry-After seconds.",
}


def _non_blank(schema) -> None:
    """Text fields trim whitespace, so a required text needs a non-space character."""
    if isinstance(schema, list):
        for item in schema:
            _non_blank(item)
        return
    if not isinstance(schema, dict):
        return
    if (schema.get("type") == "string" and schema.get("minLength", 0) >= 1
            and not {"pattern", "enum", "format"} & schema.keys()):
        schema["pattern"] = r"\S"
    for key in ("properties",):
        for value in schema.get(key, {}).values():
            _non_blank(value)
    for key in ("items", "oneOf", "anyOf", "allOf", "additionalProperties"):
        if key in schema:
            _non_blank(schema[key])


def add_error_responses(result, generator, request, public):
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    for name, component in components.items():
        if name.endswith("Request"):
            _non_blank(component)
    ref = {"$ref": "#/components/schemas/Error"}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
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
                responses.setdefault(code, {
                    "description": DESCRIPTIONS[code],
                    "content": {"application/json": {"schema": ref}},
                    **({"headers": {"Retry-After": {"schema": {"type": "integer"},
                                                    "description": "seconds to wait"}}} if code == "429" else {}),
                })
    return result
