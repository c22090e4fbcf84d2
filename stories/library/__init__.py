"""The library and the field's formats: scenarios (scenarios.py), SillyTavern cards and lorebooks
and NovelAI lorebooks (lorebooks.py, declared in lorebook_schemas.py), AI Dungeon's card JSON
(aidungeon.py)."""
