"""The words the scene reading (memory.story.presence) reads: pronouns and their
genders, moves and where to, departures, arrivals, sleep and waking, headphones,
being absorbed, whispers, speech and what is reported, being elsewhere (an
intercom, a call, a window), a passage that opens somewhere else."""

from __future__ import annotations

import re

I = re.IGNORECASE
PRONOUN = re.compile(r"\b(he|him|his|himself|she|her|hers|herself)\b", I)
GENDER = {"he": "m", "him": "m", "his": "m", "himself": "m", "she": "f", "her": "f", "hers": "f", "herself": "f"}
TITLES = {
    "mr": "m",
    "sir": "m",
    "lord": "m",
    "king": "m",
    "father": "m",
    "brother": "m",
    "uncle": "m",
    "mrs": "f",
    "ms": "f",
    "miss": "f",
    "lady": "f",
    "queen": "f",
    "mother": "f",
    "sister": "f",
    "aunt": "f",
    "madam": "f",
    "dame": "f",
}
ADVERB = r"(?:\w+ly\s+|then\s+|and\s+then\s+)?"
PLACE = (
    r"(?:off|out|away|outside|inside|home|below|upstairs|downstairs|ahead|aboard|ashore|across|through|"
    r"into\b|in\s+to|to\b|toward|towards|for\b|after\b|down\b|up\b|over\s+to|back\b|along)"
)
MOVE_VERB = (
    r"(?:go|goes|going|went|gone|head|heads|headed|heading|walk|walks|walked|run|runs|ran|ride|rides|rode|"
    r"drive|drives|drove|climb|climbs|climbed|hurry|hurries|hurried|float|floats|floated|slip|slips|"
    r"slipped|step|steps|stepped|move|moves|moved|rush|rushes|rushed|race|races|raced|wander|wanders|"
    r"wandered|march|marches|marched|sneak|sneaks|sneaked|snuck|stride|strides|strode|storm|storms|"
    r"stormed|flee|flees|fled|scurry|scurries|scurried|scamper|scampers|scampered|shuffle|shuffles|"
    r"shuffled|pad|pads|padded|drift|drifts|drifted|dash|dashes|dashed|limp|limps|trudge|trudges|"
    r"stalk|stalks|stomp|stomps|sail|sails|swim|swims|retreat|retreats|descend|descends|make\s+\w+\s+way|"
    r"makes\s+\w+\s+way|follow|follows|followed|return|returns|returned)"
)
NOT_AWAY = re.compile(
    r"^\s*(?:back\s+)?(?:to\s+sleep|to\s+bed|under\b|to\s+(?:his|her|their)\s+(?:fish|book|work|"
    r"notes|chart|drink|meal|food|reading|sketch\w*|game|papers|music|charts))",
    I,
)
LEAVE = re.compile(
    rf"\b(?:leaves?|(?<!\bis\s)(?<!\bare\s)(?<!\bwas\s)left(?!\s+(?:alone|behind\s+the|over))|departs?|exits?|{MOVE_VERB}\s+{ADVERB}{PLACE}|excuses?\s+(?:herself|himself|themselves)|"
    r"(?:is|was|has|'s|’s)\s+(?:already\s+)?gone|is\s+nowhere\s+(?:in\s+sight|to\s+be\s+(?:seen|found))|"
    r"disappears?|vanish(?:es)?|takes?\s+(?:his|her|their)\s+leave|stays?\s+(?:behind|in\s+the|at\s+the|with\s+the|"
    r"put|outside)|(?:and|then)\s+goes(?=\s*[.,;])|(?:moves?|moved|drifts?|drifted)\s+on\b|"
    r"cross(?:es|ed)?\s+the\s+\w+\s+(?:toward|towards|to)\b(?!\s+(?:you|him|her|them)\b))",
    I,
)
ARRIVE = re.compile(
    r"\b(?:returns?|returned|arrives?|arrived|enters?|entered|reappears?|rejoins?|"
    r"(?:comes?|came|walks?|walked|steps?|stepped|bursts?|burst|hurries|hurried|slips?|slipped|stumbles?|stumbled|"
    r"wanders?|wandered|strolls?|climbs?|climbed|runs?|ran|rides?|rode)\s+(?:back|in\b|inside|up\s+from|down\s+the|"
    r"over\b|out\s+of)|(?:is|was|'s|’s)\s+(?:already\s+)?(?:back|there|here)|appears?\s+at)",
    I,
)
SLEEP = re.compile(
    r"\b(?:asleep|dozes?|dozing|snor(?:es|ing)|sleeps?\b|sleeping(?!\s+(?:bag|quarters|car|pad|mat|berth))|closes?\s+(?:his|her|their)\s+eyes|"
    r"drifts?\s+back\s+to\s+sleep|goes\s+back\s+to\s+sleep|nods?\s+off|passe?s?\s+out)",
    I,
)
WAKE = re.compile(
    r"\b(?:wakes?|woke|awake|stirs?\b[^.]*?opens?\s+(?:his|her|their)\s+eyes|sits?\s+up|jerks?\s+awake)", I
)
DEAF = re.compile(
    r"\b(?:headphones?\s+(?:on|blasting)|(?:noise-cancel\w*\s+)?headphones\s+on|puts?\s+(?:his|her|"
    r"their)\s+headphones\s+back\s+on|earbuds\s+in)",
    I,
)
HEAR = re.compile(
    r"\b(?:takes?|pulls?|slides?|yanks?)\s+(?:his|her|their|the)\s+(?:headphones|earbuds)\s+"
    r"(?:off|out|down)|\b(?:takes?|pulls?|slides?|yanks?)\s+(?:off|out|down)\s+(?:his|her|their|the)\s+"
    r"(?:headphones|earbuds)|\bremoves?\s+(?:his|her|their|the)\s+(?:headphones|earbuds)",
    I,
)
ABSORBED = re.compile(
    r"\b(?:hears?\s+none\s+of\s+it|(?:can't|cannot|can’t|doesn't|does\s+not|doesn’t)\s+(?:hear|"
    r"notice)|hasn't\s+noticed|hasn’t\s+noticed|engrossed|oblivious|absorbed\s+in|doesn't\s+look\s+"
    r"up|doesn’t\s+look\s+up)",
    I,
)
PRIVATE = re.compile(
    r"\b(?:whispers?|whispered|murmurs?|murmured|so\s+low\s+that|in\s+confidence|lowers?\s+"
    r"(?:his|her|their)\s+voice|leans?\s+(?:close|in)\b|pulls?\s+\w+\s+aside|quietly\s+that|"
    r"tells?\s+\w+\s+quietly|between\s+us|under\s+(?:his|her|their)\s+breath|without\s+moving\s+"
    r"(?:his|her|their)\s+lips|under\s+the\s+(?:music|noise|din|roar|clatter|chatter)|low\s+enough\s+that|"
    r"out\s+of\s+earshot|only\s+you\s+(?:can\s+)?hear|for\s+your\s+ears\s+only|in\s+a\s+low\s+voice|"
    r"quietly\s+(?:tells?|says?|adds?|asks?|explains?|admits?)|(?:says?|said|adds?)\s+quietly|sotto\s+voce)",
    I,
)
SPEECH = re.compile(
    r"\b(?:says?|said|tells?|told|whispers?|whispered|murmurs?|mutters?|admits?|mentions?|explains?|"
    r"announces?|adds?|insists?|warns?|reports?|answers?|replies|breathes|writes|swears?|promises?|"
    r"thinks?|hopes?|claims?|rasps?|grumbles?)\b",
    I,
)
REPORTED = re.compile(
    r"^\s*(?:(?:to\s+)?(?:you|him|her|them|\w+)\s+)?(?:\w+ly\s+|in\s+(?:confidence|a\s+\w+\s+voice)"
    r"\s+|cheerfully\s+|grimly\s+)?(?:that\b|[A-Z]|the\b|a\b|his\b|her\b|their\b|he\b|she\b|"
    r"they\b|it\b|there\b|this\b|nobody\b|someone\b)",
    I,
)
REMOTE = re.compile(
    r"(?:\bintercom\b|\bradio\b|over\s+the\s+(?:phone|speaker|line)|\bspeaker\s+chirps|['’]s\s+voice|"
    r"\bvoice,\s+from|\ba\s+text\s+from|\btexts?\b|\bemail\b|\btelegram\s+from|\bcall(?:s|ed)\s+in\b|"
    r"\bcalled\s+twice|\bon\s+the\s+line|\bstreets\s+away|\bmiles\s+away)",
    I,
)
ELSEWHERE_OPENING = re.compile(
    r"^\s*(?:Through\s+the\s+(?:window|doorway|door|glass|wall)|Downstairs|Upstairs|Outside,|"
    r"Below,|Above,|Somewhere|In\s+the\s+distance|Far\s+(?:below|away|off))",
    I,
)
CUT = re.compile(
    r"^\s*(?:(?:Out|Back|Over|Down|Up)\s+(?:in|on|at|by|inside|behind|beyond|past|near|under)\s+|In\s+|Inside\s+|At\s+|On\s+)"
    r"(?!(?:dawn|dusk|night|noon|midnight|first\s+light|last|once|the\s+(?:end|same|moment|morning|"
    r"evening|afternoon|night)|\d))(?:the\s+|a\s+|an\s+|[A-Z])[^,]{1,60},",
    I,
)
# "hurries out of the kitchen to greet you": coming out of somewhere is arriving here
GREETS = re.compile(r"^\s+of\s+[^,.;]*?\b(?:to\s+(?:greet|meet|welcome|join|see)|toward|towards)\b", I)
HERO_SLEEPS = re.compile(r"\b(?:sleep|go\s+to\s+bed|turn\s+in|lie\s+down\s+to\s+rest)\b", I)
HERO_MOVE = re.compile(
    rf"\b(?:{MOVE_VERB}|cross|crosses|crossed)\s+{ADVERB}(?:(?:the|a)\s+(?:\w+\s+)?(?:stairs|steps|"
    rf"staircase|ladder|hall|hallway|corridor|courtyard|yard|room|street|road|square|field|bridge|deck|lawn|"
    rf"garden|camp|site)\s+)?(?:{PLACE}|looking\b|\w+ing\s+for)",
    I,
)
# "A jeep pulls up ... Baptiste climbs out": getting out of a vehicle that came is arriving
VEHICLE_COMES = re.compile(r"\b(?:pulls?|draws?|rolls?)\s+(?:up|in)\b|\b(?:lands|docks|taxis\s+in)\b", I)
GETS_OUT = re.compile(r"\b(?:climbs?|gets?|steps?|hops?|jumps?|clambers?)\s+out\b", I)
# the scene is loud: what two people say to each other there is heard by them alone
LOUD = re.compile(
    r"\b(?:too\s+loud|louder\s+than\s+ever|(?:the\s+)?(?:music|band|quartet|orchestra)\s+(?:is\s+|was\s+)?"
    r"(?:blares?|blaring|loud|thumps?|thumping|pounds?|pounding|too\s+loud|plays?|playing|swells?)|"
    r"deafening|can\s+barely\s+hear|roar\s+of\s+the\s+crowd|over\s+the\s+(?:music|noise|din))",
    I,
)
ANNOUNCE = re.compile(
    r"\b(?:announces?|shouts?|calls?\s+out|toast|addresses\s+the|to\s+all\s+of\s+you|to\s+everyone)\b", I
)
NOT_SUBJECT_BEFORE = re.compile(
    r"\b(?:to|with|at|from|for|of|by|toward|towards|beside|behind|past|after|before|near|"
    r"about|like|than|upon|on|in|into|onto|asks?|tells?|sends?)\s+$",
    I,
)
PERCEIVED = re.compile(
    r"\b(?:sees?|saw|glimpses?|glimpsed|watch(?:es)?|watched|finds?|found|spots?|spotted|"
    r"notices?|noticed|hears?|heard)\s+$",
    I,
)
# what may stand before the protagonist's name when it is the subject ("..., and you", "When you")
CLAUSE_OPENS = re.compile(
    r"(?:^|[,;:.!?\"“”—–-]|\b(?:and|but|then|when|as|while|before|after|until|once|if|so|because|where|"
    r"whom|who|that|till|since|though|although|now))\s*$",
    I,
)
WITH = re.compile(r"\b(?:with|follows?|followed|after|behind|takes?|brings?)\s+$", I)
