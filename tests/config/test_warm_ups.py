"""A web process loads what a turn needs as it starts (settings.SERVE_WARM_UPS), so the first player
after a deploy or a restart does not wait for it: the local embedding model and the token encoding
that cuts the turn's query (~110 ms on the first turn of each process before it was warmed)."""

from django.conf import settings
from django.utils.module_loading import import_string

from memory import embedder
from memory.story import retrieval
from stories import providers
from stories.prompt import tokens


def test_the_warm_ups_load_the_embedder_and_the_encoding_a_turn_uses():
    tokens.encoding_for.cache_clear()
    embedder._local.cache_clear()
    providers._sdk_platform.cache_clear()
    for path in settings.SERVE_WARM_UPS:
        import_string(path)()
    loaded = tokens.encoding_for.cache_info()
    assert loaded.currsize == 1 and embedder._local.cache_info().currsize == 1
    assert providers._sdk_platform.cache_info().currsize == 1, "the model client's platform, asked once"
    # the turn's query text is cut with that encoding: nothing new is loaded for it
    retrieval.query_text(None, story=[])
    assert tokens.encoding_for.cache_info().misses == loaded.misses
