"""What the model is told: the prompt's parts under a token budget (context.py), which story cards
enter it (triggers.py), token counts (tokens.py), the player's sampling (sampling.py) and a
prompt's fingerprint for prefix caches (prefix.py)."""
