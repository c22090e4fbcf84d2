"""The verbs the offline claims reader (memory.story.claims_words) knows, in every finished form: an
inflection table and the lexicons of dying, killing, burying, leaving, arriving, swearing and breaking
an allegiance."""

from __future__ import annotations

import re

# verbs the reader knows in every finished form: base ("you die" told in third person keeps it), third
# person, past and participle (never "-ing": "is dying" is not yet dead)
IRREGULAR = {
    "slay": "slays slew slain", "hang": "hangs hanged hung", "strike": "strikes struck stricken",
    "cut": "cuts cut cut", "run": "runs ran run", "ride": "rides rode ridden", "go": "goes went gone",
    "flee": "flees fled fled", "leave": "leaves left left", "set": "sets set set", "make": "makes made made",
    "take": "takes took taken", "give": "gives gave given", "steal": "steals stole stolen", "sell": "sells sold sold",
    "buy": "buys bought bought", "lose": "loses lost lost", "throw": "throws threw thrown", "find": "finds found found",
    "win": "wins won won", "fall": "falls fell fallen", "drive": "drives drove driven", "fly": "flies flew flown",
    "sink": "sinks sank sunk", "shoot": "shoots shot shot", "stab": "stabs stabbed stabbed",
    "bury": "buries buried buried", "die": "dies died died", "come": "comes came come", "swim": "swims swam swum",
    "put": "puts put put", "freeze": "freezes froze frozen", "bleed": "bleeds bled bled", "smite": "smites smote smitten",
    "hurry": "hurries hurried hurried", "journey": "journeys journeyed journeyed", "travel": "travels travelled traveled",
    "row": "rows rowed rowed", "slip": "slips slipped slipped", "stride": "strides strode stridden",
    "drop": "drops dropped dropped", "rid": "rids rid rid", "gun": "guns gunned gunned", "grab": "grabs grabbed grabbed",
}  # fmt: skip


def _inflections(verb: str) -> list[str]:
    if verb == "be":
        return ["be", "is", "are", "was", "were", "been"]
    if verb in IRREGULAR:
        return [verb, *IRREGULAR[verb].split()]
    if re.search(r"(?:s|sh|ch|x|z|o)$", verb):
        third = verb + "es"
    elif re.search(r"[^aeiou]y$", verb):
        third = verb[:-1] + "ies"
    else:
        third = verb + "s"
    past = verb + "d" if verb.endswith("e") else (verb[:-1] + "ied" if re.search(r"[^aeiou]y$", verb) else verb + "ed")
    return [verb, third, past]


def forms(*phrases: str, participle: bool = True) -> str:
    """A regex alternation of every finished form of these verb phrases (the first word inflected)."""
    out = []
    for phrase in phrases:
        head, _, rest = phrase.partition(" ")
        words = _inflections(head)
        if not participle and head in IRREGULAR:
            words = words[:3]
        for word in dict.fromkeys(words):
            out.append(re.escape(word) + ("\\s+" + r"\s+".join(map(re.escape, rest.split())) if rest else ""))
    return "(?:" + "|".join(sorted(out, key=len, reverse=True)) + ")"


DYING = forms(
    "die",
    "perish",
    "drown",
    "succumb",
    "expire",
    "starve to death",
    "freeze to death",
    "bleed to death",
    "bleed out",
    "pass away",
    "pass on",
)
KILLING = forms(
    "kill",
    "slay",
    "murder",
    "execute",
    "hang",
    "behead",
    "assassinate",
    "butcher",
    "slaughter",
    "strangle",
    "smother",
    "stab to death",
    "shoot dead",
    "gun down",
    "shoot down",
    "strike down",
    "cut down",
    "run through",
    "put to death",
    "put to the sword",
    "burn at the stake",
    "burn to death",
    "poison to death",
    "crucify",
    "decapitate",
    "smite",
    "massacre",
    "lynch",
    "stone to death",
    "beat to death",
)
BURYING = forms("bury", "mourn", "avenge", "cremate", "entomb", "inter")
DEPARTING = forms(
    "leave",
    "depart",
    "head out",
    "ship out",
    "set forth",
    "withdraw",
    "relocate",
    "transfer",
    "be sent",
    "be taken",
    "be carried",
    "be brought",
    "be shipped",
    "be exiled",
    "be banished",
    "set out",
    "set off",
    "set sail",
    "sail",
    "ride",
    "head",
    "travel",
    "journey",
    "flee",
    "march",
    "fly",
    "drive",
    "return",
    "go",
    "move",
    "escape",
    "retreat",
    "hurry",
    "hasten",
    "row",
    "walk",
    "run",
    "take ship",
    "take passage",
    "board",
    "slip away",
    "steal away",
    "emigrate",
    "stride",
    "make way",
    "be gone",
    "sneak off",
)
ARRIVING = forms(
    "arrive",
    "reach",
    "turn up",
    "show up",
    "appear",
    "wash up",
    "come ashore",
    "pull in",
    "enter",
    "land",
    "settle",
    "dock",
    "make port",
    "come",
    "return",
    "limp",
    "stagger",
    "march",
    "ride",
    "sail",
    "walk",
    "drive",
    "fly",
    "pull",
    "stride",
    "row",
    "wander",
    "stumble",
    "move",
)
SWEARING = forms(
    "join",
    "swear fealty to",
    "swear allegiance to",
    "swear loyalty to",
    "swear an oath to",
    "swear himself to",
    "swear herself to",
    "pledge allegiance to",
    "pledge loyalty to",
    "pledge his sword to",
    "pledge her sword to",
    "pledge service to",
    "defect to",
    "side with",
    "go over to",
    "cross over to",
    "enlist in",
    "enlist with",
)
BREAKING = forms(
    "betray",
    "desert",
    "turn on",
    "turn against",
    "break with",
    "leave",
    "abandon",
    "renounce",
    "forsake",
    "rebel against",
    "rise against",
)
