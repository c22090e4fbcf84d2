"""How a story node is told: the one rendering of a player's act. To the model and in the exports
it is the second person ("> You draw your sword", '> You say "Halt!"'), as AI Dungeon tells it
whether the player typed "draw my sword" in the first person or the second; in memories and scene
readings the third, with the protagonist's name ("Mira chose to draw her sword."). The page shows
what the player typed."""

from __future__ import annotations

import re
from functools import lru_cache

from stories.models import Action

_QUOTED = re.compile(r'("[^"]*"?|“[^”]*”?)')  # what someone says keeps its own "I"
_A = "['’]"  # either apostrophe
_SENTENCE_START = re.compile(r"(^|[.!?]\s+|\n\s*|^[\s>*(\[-]+)$")
# "the old mine" is a place: "mine" after one of these words is not the player's
_MINE_A_NOUN_AFTER = frozenset(
    "the a an this that these those every each no some any another old abandoned gold silver coal iron "
    "deep dark salt copper tin".split()
)
_FIRST_PERSON = [  # (pattern, its second person from the match)
    (
        re.compile(rf"\b[Ii]({_A})(m|ve|ll|d)\b"),
        lambda m: f"you{m.group(1)}{'re' if m.group(2) == 'm' else m.group(2)}",
    ),
    (re.compile(r"\b[Ii] (am|was)\b"), lambda m: "you are" if m.group(1) == "am" else "you were"),
    (re.compile(r"\b(am|was) [Ii]\b", re.I), lambda m: "are you" if m.group(1).lower() == "am" else "were you"),
    (re.compile(r"\b[Ii]\b(?!['’.]\w)"), lambda m: "you"),  # never the I of "I.O.U." or an initial
    (re.compile(r"\bmyself\b", re.I), lambda m: "yourself"),
    (re.compile(r"\bmy\b", re.I), lambda m: "your"),
    (re.compile(r"\bme\b", re.I), lambda m: "you"),
    (re.compile(r"\bmine\b", re.I), lambda m: "yours"),
]


_ANY_FIRST_PERSON = re.compile(r"\b(?:i|my|me|mine|myself)\b", re.I)  # every pattern above holds one


def second_person(text: str) -> str:
    """``text`` with the first person outside quotes told in the second: "I lift my lantern" is "You
    lift your lantern", "I'm", "I've", "me", "mine", "myself" too; "I am" / "was I" agree ("you
    are", "were you"). Names that begin with I (Ingrid, Ivo) and "the old mine" stay as written.
    Most acts hold no first person ("draw the sword"): one search, not eight (every turn tells its
    story's last hundreds of nodes)."""
    if not _ANY_FIRST_PERSON.search(text):
        return text
    pieces = _QUOTED.split(text)
    return "".join(p if i % 2 else _second_person_outside(p, text_start=i == 0) for i, p in enumerate(pieces))


def _second_person_outside(text: str, *, text_start: bool) -> str:
    for pattern, replacement in _FIRST_PERSON:
        text = pattern.sub(lambda m, r=replacement: _told_as(m, r(m), text_start), text)
    return text


def _told_as(match: re.Match, replacement: str, text_start: bool) -> str:
    found, before = match.group(0), match.string[: match.start()]
    if found.lower() == "mine":
        previous = re.findall(r"[A-Za-z]+", before[-30:])
        if previous and previous[-1].lower() in _MINE_A_NOUN_AFTER:
            return found
    at_start = bool(_SENTENCE_START.search(before)) and (text_start or bool(before.strip()))
    if at_start or (found[:1].isupper() and found[:1] != "I"):
        return replacement[:1].upper() + replacement[1:]
    return replacement


def told(action: Action) -> str:
    """The node as the model reads it (and the exports write it). A member's turn in a story played
    together (``actor``: the character they play) is told under that character's name, as written:
    "> Sela: I climb the wall", '> Sela says "Halt!"'; "you" stays the owner's persona. A secret
    (stories.party.secrets) says who shares it, so the narration keeps it among them."""
    heard = getattr(action, "heard_by", None)
    if getattr(action, "seen_by", None) is None or not heard:
        return _told(action)
    if len(heard) == 1:
        return f"(told privately, known only to {heard[0]}) {_told(action)}"
    return f"(whispered, known only to {', '.join(heard[:-1])} and {heard[-1]}) {_told(action)}"


def _told(action: Action) -> str:
    text = action.text.strip()
    if getattr(action, "actor", "") and action.kind in (Action.Kind.DO, Action.Kind.SAY):
        if action.kind == Action.Kind.SAY:
            return f'> {action.actor} says "{text.strip(chr(34))}"'
        return f"> {action.actor}: {text}"
    if action.kind == Action.Kind.DO:
        return _you_do_kept(text) if len(text) <= YOU_DO_KEPT_CHARS else _you_do(text)
    if action.kind == Action.Kind.SAY:
        return f'> You say "{text.strip(chr(34))}"'
    return text


def _you_do(text: str) -> str:
    """A player's act told in the second person."""
    text = second_person(text)
    if re.match(r"you\b", text, re.I):
        return "> You" + text[3:]
    return f"> You {_lowered(text)}"


# Kept a process: every turn tells its story's last hundreds of nodes, the last turn's but two
# (py-spy: the first person's patterns were a tenth of a web process's CPU in an evening of players
# who write "I ..."). Acts up to 400 characters (most are a line), 32,768 of them: ~30 MB at most.
YOU_DO_KEPT_CHARS = 400
_you_do_kept = lru_cache(maxsize=1 << 15)(_you_do)


def told_of(action: Action, *, name: str) -> str:
    """The node as a memory tells it, on one line: the player's act as ``name``'s ("Mira chose to
    ..."), the narration as written (its "you" is the memory writer's to turn into ``name``). A
    member's act is their character's (``actor``), whatever ``name`` says."""
    text = action.text.replace("\n", " ").strip()
    name = getattr(action, "actor", "") or name
    if action.kind == Action.Kind.DO:
        text = second_person(text)
        if re.match(r"you(['’]|\s+(are|were)\b)", text, re.I):  # "You're going to ...": the writer's to name
            return text
        text = re.sub(r"^you\s+", "", text, flags=re.I).rstrip(".!?")
        return f"{name} chose to {_lowered(text)}."
    if action.kind == Action.Kind.SAY:
        return f'{name} said, "{text.strip(chr(34))}"'
    return text


_COMMAND_WORDS = frozenset(
    """look go walk run take open close attack draw ask tell try use search read climb jump enter leave pick
    grab throw give put eat drink sit stand wait listen follow push pull turn light lift hide cast check examine
    head move return call shout whisper nod smile step kneel rest sleep buy sell pay fight flee inspect explore
    continue keep start stop get make let help show find drop raise lower swing strike block dodge duck wave
    knock ring write sing play pray ride sail swim dig cut break fix tie untie load aim shoot fire kick punch
    hold carry pour fill empty pack bow offer accept refuse thank greet agree answer reply sneak crawl touch
    smell taste feel think remember decide lean reach point glance stare watch peer walk wander hurry rush
    dash charge retreat approach investigate ignore laugh cry sigh shrug grin frown scream yell mutter
    hum whistle clap sneeze cough breathe hug kiss slap stab slash parry heal bandage equip unequip wear
    remove ready sheathe unsheathe count gather collect craft cook build repair search light extinguish
    lock unlock slam shut pocket steal trade bargain haggle order summon chant focus meditate prepare""".split()
)


def _lowered(text: str) -> str:
    """An action typed as a command ("Look around") follows "You" in lower case; a word in capitals
    or a name the story gave (anything not a plain capitalised word) stays."""
    word = re.match(r"[A-Za-z]+", text)
    if word and word.group(0)[1:].islower() and word.group(0).lower() in _COMMAND_WORDS:
        return text[:1].lower() + text[1:]
    return text


def is_players(action: Action) -> bool:
    """Whether the node is the player's own act (an export marks it)."""
    return action.kind in (Action.Kind.DO, Action.Kind.SAY)
