"""Accounts: a player's AI settings and which connection work may spend (ai_settings.py), keys
encrypted at rest (crypto.py), and who may do what how often (auth.py)."""
