"""A chat completion's answer read as the endpoint sent it: the SDK hands its JSON over as it is
(``cast_to=object``), with no model object made of it and no walk of the request against declared
types; what is read is checked here, and a shape that is not OpenAI's is a ValueError (the one door
reports ``bad_response``)."""

from __future__ import annotations


def count(usage, name: str) -> int:
    """A token count of the call's usage (a plain dict, or an object with that attribute); 0 when it
    is not a count."""
    value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def chat_answer(data) -> tuple[str, str, dict | None, str | None]:
    """The answer's text (its first choice's message; "" when it has none), the model it names, its
    usage and its finish reason."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    message = choices[0].get("message")
    if message is not None and not isinstance(message, dict):
        raise ValueError("the answer's message is not an object")
    text = (message or {}).get("content")
    if text is not None and not isinstance(text, str):
        raise ValueError("the answer's content is not text")
    model = data.get("model")
    usage = data.get("usage")
    finish = choices[0].get("finish_reason")
    return (
        text or "",
        model if isinstance(model, str) else "",
        usage if isinstance(usage, dict) else None,
        finish if isinstance(finish, str) else None,
    )
