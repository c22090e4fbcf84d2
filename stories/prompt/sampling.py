"""How the model samples: the player's settings beyond temperature (top_p, top_k, min_p, the
penalties, stop strings), the named presets that set them at once, and the request fields they
become. A setting left empty is not sent, and a field an endpoint does not take is not sent to it:
OpenAI's own API refuses top_k, min_p and repetition_penalty, which vLLM, llama.cpp, KoboldCpp,
Ollama's OpenAI endpoint and OpenRouter take."""

from __future__ import annotations

from urllib.parse import urlsplit

from stories.models import AISettings

FIELDS = ("top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty")
OPENAI_ONLY = ("top_p", "frequency_penalty", "presence_penalty")  # what api.openai.com takes of FIELDS
OPENAI_HOSTS = ("api.openai.com",)
STOP_MAX = 4  # stop strings (OpenAI's limit)
STOP_LENGTH_MAX = 50

# Named starting points; the player's own values in the same change win.
PRESETS: dict[str, dict] = {
    "default": {
        "temperature": 0.8,
        **{name: None for name in FIELDS},
    },
    "balanced": {
        "temperature": 0.85,
        "top_p": 0.95,
        "top_k": None,
        "min_p": 0.05,
        "frequency_penalty": None,
        "presence_penalty": None,
        "repetition_penalty": 1.05,
    },
    "creative": {
        "temperature": 1.05,
        "top_p": 0.98,
        "top_k": None,
        "min_p": 0.05,
        "frequency_penalty": None,
        "presence_penalty": 0.3,
        "repetition_penalty": 1.1,
    },
    "precise": {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": None,
        "frequency_penalty": 0.2,
        "presence_penalty": None,
        "repetition_penalty": None,
    },
}
PRESET_NAMES = tuple(sorted(PRESETS))  # the one choice set of every field that names a preset
PRESET_NOTES = {
    "default": "the endpoint's own sampling, temperature 0.8",
    "balanced": "steady prose that still surprises",
    "creative": "freer word choice, fewer repeats",
    "precise": "close to the likeliest words, for rules-heavy stories",
}


def request_fields(ai: AISettings, endpoint_url: str) -> dict:
    """The request's sampling fields beside temperature: those the player set, that the endpoint
    takes."""
    host = (urlsplit(endpoint_url).hostname or "").lower()
    takes = OPENAI_ONLY if host in OPENAI_HOSTS else FIELDS
    out = {name: getattr(ai, name) for name in takes if getattr(ai, name) is not None}
    if ai.stop:
        out["stop"] = list(ai.stop)
    return out
