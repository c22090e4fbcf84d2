"""The words the offline claims reader (memory.story.claims_reader) reads: what hedges a sentence (a
plan, a condition, a rumour, a dream, a lie), and what follows or comes before a card's name when
the sentence states a death, a reversal, a disappearance, an arrest, a move, an item changing hands,
a title, an allegiance, a marriage, a place destroyed or an alias."""

from __future__ import annotations

import re

from memory.story.claims_verbs import ARRIVING, BREAKING, BURYING, DEPARTING, DYING, KILLING, SWEARING

I = re.IGNORECASE
TEXT_MAX = 300  # characters of a claim's sentence
SLOTS = ("status", "whereabouts", "role", "allegiance", "holdings", "relations", "alias")  # what a claim is about

HEDGE = re.compile(
    r"\b(?:plans?|planned|planning|"
    r"plots?|plotted|intends?|intended|means\s+to|meant\s+to|going\s+to|about\s+to|threat\w*|hopes?|hoped|"
    r"wants?\s+to|wanted\s+to|wish\w*|if|unless|whether|perhaps|maybe|pretend\w*|feign\w*|"
    r"fak(?:e|es|ed|ing)|disguis\w*|dressed\s+as|posing\s+as|poses\s+as|lie[sd]?\s+to|lying\s+to|lied|a\s+lie|"
    r"rumou?r\w*|gossip\w*|news|word\s+(?:is|was|has|had|came|comes|reach\w*|spread\w*|arriv\w*|got|gets)|letter|"
    r"messenger|"
    r"legend|songs?|tale|(?:is|are|was|were)\s+said|(?:hears?|heard|learns?|learned|says?|said|tells?|told|"
    r"whispers?|whispered|claims?|claimed|insists?|insisted|reports?|reported|swears?|swore|believes?|"
    r"believed|thinks?|thought|fears?|feared|suspects?|suspected|knows?|knew|according)\s+(?:\w+\s+)?that|"
    r"(?:some|people|they|everyone|folk|villagers|others)\s+(?:say|said|whisper\w*|claim\w*)|supposedly|"
    r"allegedly|apparently|dream\w*|vision\w*|nightmare\w*|imagin\w*|pictures?\s+(?:\w+\s+)?(?:dead|dying)|"
    r"seems?|seemed|as\s+if|as\s+though|looks?\s+like|"
    r"vows?\s+to|vowed\s+to|swears?\s+to|swore\s+to|promises?\s+to|promised\s+to|used\s+to|remembers?|remembered|recalls?|recalled|story|stories|play|"
    r"rehears\w*|mock|pretence|pretense|ruse|trick\w*|staged|actor|thinks?|thought|believes?|believed|assumes?|"
    r"assumed|supposes?|supposed|guess\w*|wonders?|wondered|doubts?|doubted|expects?|expected|refuses?|refused|"
    r"declines?|declined|hesitat\w*|considers?|considered|offers?\s+to|offered\s+to|wait\w*\s+for\s+news)\b",
    I,
)
DREAM = re.compile(r"\b(?:dream\w*|vision\w*|nightmare\w*|hallucinat\w*|trance)\b", I)
WAKE = re.compile(r"\b(?:wakes?|woke|awake\w*|waking|comes?\s+to|came\s+to)\b", I)
PRONOUN_START = re.compile(
    r"^\s*(?:(?:then|later|at\s+last|finally|soon),?\s+|(?:a|an|one|two|three|some|that|this|next|by|the\s+next)\s+"
    r"(?:\w+\s+){0,2}?(?:later|after|ago|morning|night|evening|day|week|month|year|dawn|dusk|noon|midnight),?\s+|(?:with|in|at|on|after|before|by|from|for|despite|without|"
    r"under|within|once)\s+[^,.;]{1,40}?,?\s+)?(he|she)\b",
    I,
)
# between a name and its verb: a surname, "from the Blue Lantern", an aside in commas, an adverb, or a
# first verb and "and" ("Jory comes to her cabin and steals the chart")
GAP = (
    r"(?-i:\s+[A-Z][\w'’-]+)?(?:\s+(?:from|of)\s+the(?-i:\s+[A-Z][\w'’-]+){1,2})?\s*(?:,[^,.;]{1,60},\s*)?"
    r"(?:(?:(?!\b(?:who|which|as|while|when|where|until|because)\b)[^.;:\"“”]){1,60}?\s(?:and|then)\s+)?"
    r"(?:(?:\w+ly|then|too|also|finally|at\s+last|soon)\s+)?"
)

# --- what a character's name (or he/she) followed by these words means
DEATH_AFTER = re.compile(
    GAP + r"(?:(?:(?:has|had)\s+(?:\w+ly\s+)?)?" + DYING + r"\b|"
    r"(?:is|was|has\s+been|had\s+been|gets|got)\s+(?:\w+ly\s+)?(?:declared|pronounced|confirmed|found)\s+dead|"
    r"(?:is|was|lies|lay|lay\s+there|falls|fell|drops|dropped)\s+(?:\w+\s+)?dead\b|"
    r"(?:is|was|has\s+been|had\s+been|gets|got)\s+(?:\w+ly\s+)?" + KILLING + r"\b|"
    r"breathes?\s+(?:his|her|their)\s+last|breathed\s+(?:his|her|their)\s+last|is\s+no\s+more|was\s+no\s+more|"
    r"(?:is|was|lies|lay|has\s+been|had\s+been)\s+" + BURYING + r"|(?:is|was)\s+laid\s+to\s+rest|"
    r"'s\s+heart\s+stops|’s\s+heart\s+stops|"
    r"[^.;]{0,60}?,?\s+(?:his|her)\s+face\s+covered\s+(?:with|by)\s+(?:a|the)\s+(?:sheet|blanket|shroud|cloth|cloak))",
    I,
)
DEATH_BEFORE = re.compile(
    r"(?:\b(?:" + KILLING + "|" + BURYING + r")|"
    r"\b(?:the\s+)?(?:body|corpse|remains|grave|coffin|pyre|funeral|death|murder|killing|execution)\s+of|"
    r"\b(?:the\s+)?late)\s+$",
    I,
)
DEATH_POSSESSIVE = re.compile(
    r"^(?:'s|’s)\s+(?:\w+\s+)?(?:body|corpse|remains|grave|coffin|pyre|funeral|death|burial|ashes|"
    r"lifeless|dead\s+body|cold\s+body|wake\b|shroud|tomb|eyes\s+(?:are\s+)?(?:closed\s+)?for\s+the\s+last)",
    I,
)
DEATH_OBJECT_BEFORE = re.compile(r"\b(?:pronounces?|pronounced|declares?|declared|finds?|found)\s+$", I)
DEATH_OBJECT_AFTER = re.compile(r"^(?-i:\s+[A-Z][\w'’-]+)??\s+(?:dead|deceased|lifeless)\b", I)
# "..., and she falls dead": a he or she opening a clause, after the first
CLAUSE_PRONOUN = re.compile(r"(?:,\s*(?:and\s+|but\s+|then\s+)?|[;:]\s*|\band\s+(?:then\s+)?)(he|she)\b", I)
FACE_COVERED = re.compile(
    r"\b(?:pulls?|pulled|draws?|drew|lays?|laid)\s+(?:a|the)\s+(?:blanket|sheet|shroud|cloak|cloth)\s+over\s+$", I
)
ALIVE_AFTER = re.compile(
    GAP + r"(?:(?:is|was)\s+(?:still\s+|very\s+much\s+)?alive|lives\b|survived|survives|"
    r"(?:is|was)\s+not\s+dead|never\s+died|returns?\s+from\s+the\s+dead|"
    r"(?:steps?|stepped|walks?|walked|crawls?|crawled|stumbles?|stumbled)\s+(?:\w+,?\s+){0,5}alive|"
    r"faked\s+(?:his|her|their)\s+(?:own\s+)?death|had\s+faked\s+(?:his|her|their)\s+(?:own\s+)?death)",
    I,
)
MISSING_AFTER = re.compile(
    GAP + r"(?:(?:is|was|has\s+been|had\s+been)\s+(?:\w+ly\s+)?(?:missing|abducted|kidnapped|taken\s+captive|"
    r"captured|taken\s+prisoner|carried\s+off)|(?:goes|went|has\s+gone|had\s+gone)\s+missing|"
    r"vanishe[sd]\s+without\s+a\s+trace)\b",
    I,
)
CAUGHT_AFTER = re.compile(
    GAP + r"(?:is|was|has\s+been|had\s+been)\s+(?:\w+ly\s+)?(?:[^.;:]{1,60}?\s+and\s+(?:then\s+)?)?"
    r"(?P<how>arrested|imprisoned|jailed|locked\s+up|locked\s+in\s+(?:the|a)\s+(?:brig|cell|jail|gaol|prison|"
    r"dungeon|stocks)|thrown\s+(?:in|into)\s+(?:the|a)\s+(?:brig|cell|jail|gaol|prison|dungeon)|taken\s+prisoner|"
    r"taken\s+into\s+custody|released|freed|set\s+free|pardoned|escaped|acquitted)\b",
    I,
)
PLACE_NAME = r"(?P<place>(?:the\s+)?[A-Z][\w'’-]+(?:\s+(?:of\s+)?[A-Z][\w'’-]+){0,3}(?:['’]s\s+[a-z]+)?)"
BETWEEN = (  # a few words between a move and where to: "north", "hard all night", "with his men", "at once"
    r"(?:\s+(?:the\s+\w+|a\s+\w+|with\s+[\w'’]+|by\s+\w+|[a-z][\w'’-]*)){0,4}?"
)
DEPART_AFTER = re.compile(
    GAP
    + r"(?:(?:has\s+|had\s+|is\s+)?"
    + DEPARTING
    + BETWEEN
    + r"\s+(?:for|towards?|bound\s+for|(?:back\s+|home\s+)?to)"
    r"|is\s+on\s+(?:the|her|his|their)\s+way\s+to)\s+" + PLACE_NAME,
)
ARRIVE_AFTER = re.compile(
    GAP + r"(?:(?:has\s+|had\s+)?" + ARRIVING + BETWEEN + r"(?:\s+(?:at|in|into|back\s+to|back\s+in|to))?"
    r"|(?:is|was)\s+back\s+in)\s+" + PLACE_NAME,
)
# an item: "the silver key", "his sword" (ending where the phrase does: "the silver key to Maud")
ITEM = (
    r"(?P<item>(?:the|his|her|their|a)\s+(?:[A-Za-z][\w'’-]*\s+){0,3}?[a-zA-Z][\w'’-]*)"
    r"(?=\s*(?:[.,;:!?\"”]|$)|\s+(?:and|to|from|in|into|on|onto|at|with|before|after|as|while|for|back|away|"
    r"under|over|beside|behind|across|through|then|but|north|south|east|west|off|home|out|up|down|inside|outside|"
    r"along|toward|towards|upstairs|downstairs|aboard|ashore|by|without|once|now)\b)"
)
GIVE_AFTER = re.compile(
    GAP + r"(?:gives?|gave|hands?|handed|passes|passed|entrusts?|entrusted|sells?|sold|returns?|returned|"
    r"leaves?|left|bequeaths?|bequeathed)\s+" + ITEM + r"\s+to\s+(?P<to>(?:the\s+)?[\w'’-]+)",
)
GIVE_TO_AFTER = re.compile(
    GAP + r"(?:gives?|gave|hands?|handed|passes|passed|sells?|sold)\s+(?P<to>[A-Z][\w'’-]+)\s+" + ITEM + r"\b",
)
TAKE_AFTER = re.compile(
    GAP + r"(?:takes?|took|steals?|stole|snatch(?:es|ed)|grabs?|grabbed|pockets?|pocketed|receives?|received|"
    r"accepts?|accepted|picks?\s+up|picked\s+up|wins?|won|buys?|bought|claims?|claimed|inherits?|inherited|"
    r"recovers?|recovered|finds?|found|seizes?|seized)\s+" + ITEM + r"(?:\s+from\s+(?P<from>[A-Z][\w'’-]+))?",
)
TAKING = (
    r"(?:takes?|took|pry|pries|pried|prises?|prised|pulls?|pulled|wrests?|wrested|wrench(?:es|ed)|steals?|stole|"
    r"snatch(?:es|ed)|grabs?|grabbed|seizes?|seized|confiscates?|confiscated|rips?|ripped|tears?|tore)"
)
TAKEN_FROM_BEFORE = re.compile(r"\b" + TAKING + r"\s+" + ITEM + r"\s+from\s+(?:the\s+)?$")
TAKEN_FROM_PRONOUN = re.compile(r"\b" + TAKING + r"\s+" + ITEM + r"\s+from\s+(?P<pronoun>his|her)\b")
GIVEN_TO_BEFORE = re.compile(
    r"\b(?:gives?|gave|hands?|handed|passes|passed|entrusts?|entrusted|returns?|returned|sells?|sold)\s+"
    + ITEM
    + r"\s+(?:back\s+)?to\s+$"
)
GIVEN_BEFORE = re.compile(r"\b(?:gives?|gave|hands?|handed|passes|passed|sells?|sold)\s+$")
NOT_HELD = re.compile(  # what "takes", "loses" or "finds" without holding it: "takes the stairs", "loses his way"
    r"(?:the|a|his|her|their)\s+(?:\w+\s+)?(?:way|road|path|stairs|step|steps|lead|turn|time|chance|breath|life|lives|"
    r"temper|nerve|balance|footing|patience|mind|head|heart|voice|sight|senses?|grip|courage|hope|track|"
    r"throne|seat|place|stand|aim|count|vow|oath|word|hand|arm|leave|fight|battle|war|race|game|bet)\b",
    I,
)
LOSE_AFTER = re.compile(
    GAP + r"(?:loses?|lost|breaks?|broke|shatters?|shattered|destroys?|destroyed|burns?|burned|burnt|"
    r"throws?\s+away|threw\s+away|casts?\s+away|melts?\s+down|melted\s+down)\s+" + ITEM,
)
ROLE_WORD = (
    r"(?i:captain|commander|king|queen|lord|lady|chief|head|leader|mayor|master|mistress|steward|regent|general|"
    r"marshal|sheriff|warden|abbot|abbess|priest|priestess|bishop|prince|princess|duke|duchess|baron|baroness|"
    r"knight|squire|heir|emperor|empress|chancellor|governor|admiral|guildmaster|elder|champion|apprentice|"
    r"councillor|councilor|magistrate|judge|sergeant|lieutenant|officer|boss|director|president|ambassador|"
    r"keeper|monarch|ruler|sovereign|executive|manager|supervisor|editor|principal|dean|castellan|seneschal|constable|provost|reeve|bailiff|vizier|consul|senator|tribune|centurion|"
    r"chieftain|thane|earl|count|countess|marquis|archbishop|cardinal|pope|matriarch|patriarch|foreman|"
    r"overseer|quartermaster|navigator|pilot|first\s+mate|mate|deputy|marshal|inspector|superintendent|"
    r"chairman|chairwoman|ceo|headmaster|headmistress|high\s+\w+)"
)
ROLE = (
    r"(?P<role>(?:the\s+(?:new\s+)?|a\s+|an\s+)?(?:[a-zA-Z][\w'’-]*\s+){0,4}?"
    + ROLE_WORD
    + r"(?:\s+"
    + ROLE_WORD
    + r")*(?:\s+of\s+(?:the\s+)?[\w'’-]+(?:\s+[A-Z][\w'’-]+){0,2})?)"
)
ROLE_AFTER = re.compile(
    GAP + r"(?:(?:is|was|has\s+been|had\s+been)\s+(?:\w+ly\s+)?(?:crowned|named|made|appointed|proclaimed|"
    r"elected|promoted\s+to|sworn\s+in\s+as|knighted\s+as|raised\s+to|chosen\s+as)|becomes|became|"
    r"takes?\s+up\s+the\s+post\s+of|took\s+up\s+the\s+post\s+of|succeeds?\s+\w+\s+as|succeeded\s+\w+\s+as)\s+"
    r"(?:as\s+)?" + ROLE,
)
ROLE_OBJECT_BEFORE = re.compile(
    r"\b(?:names?|named|appoints?|appointed|crowns?|crowned|makes?|made|proclaims?|proclaimed|promotes?|promoted|"
    r"elects?|elected|dubs?|dubbed|swears?|swore)\s+$",
    I,
)
ROLE_OBJECT_AFTER = re.compile(r"^(?-i:\s+[A-Z][\w'’-]+)??\s+(?:in\s+)?(?:as\s+|to\s+)?" + ROLE)
ROLE_LOST_AFTER = re.compile(
    GAP + r"(?:(?:is|was|has\s+been|had\s+been)\s+(?:\w+ly\s+)?(?P<done>stripped\s+of\s+(?:his|her|their)\s+(?:\w+\s+)?"
    r"(?:rank|title|command|office|crown|post)|deposed|dethroned|dismissed|demoted|exiled|banished|cast\s+out|fired|"
    r"sacked|ousted|removed\s+from\s+office)|(?:has\s+|had\s+)?(?P<did>abdicates?|abdicated|resigns?|resigned|"
    r"steps?\s+down|stepped\s+down|retires?|retired|quits?)\b)",
    I,
)
ALLEGIANCE_AFTER = re.compile(
    GAP + r"(?:has\s+|had\s+)?(?P<verb>" + SWEARING + "|" + BREAKING + r")\s+"
    r"(?P<group>(?:the\s+)?[A-Z][\w'’-]+(?:\s+(?:of\s+)?[A-Z][\w'’-]+){0,3})",
)
BREAKS = re.compile(r"^(?:" + BREAKING + r")$", I)
MARRY_AFTER = re.compile(GAP + r"(?:marries|married|weds|wedded)\s+(?P<to>[A-Z][\w'’-]+)")
PLACE_DESTROYED_AFTER = re.compile(
    GAP
    + r"(?:(?:is|was|lies|lay)\s+(?:now\s+)?(?:a|an)\s+(?:[\w-]+\s+){0,2}(?:shell|ruin|ruins|husk|wreck|wasteland)\b|(?:has|had)\s+(?:\w+ly\s+)?(?:burned|burnt)\s+(?:down|to\s+the\s+ground|to\s+ashes)|"
    r"(?:has|had)\s+(?:\w+ly\s+)?(?:sunk|collapsed|crumbled|exploded|fallen\s+to\s+the)|burns?\s+(?:down|to\s+the\s+ground|to\s+ashes)|burned\s+(?:down|to\s+the\s+ground|to\s+ashes)|"
    r"burnt\s+(?:down|to\s+the\s+ground)|(?:is|was|has\s+been|had\s+been|lies|lay)\s+(?:\w+ly\s+)?"
    r"(?:destroyed|razed|levell?ed|flattened|burned\s+down|burnt\s+down|burned\s+to\s+the\s+ground|"
    r"reduced\s+to\s+(?:ash|ashes|rubble|ruin|ruins)|in\s+ruins|in\s+ashes|swallowed\s+by\s+the\s+sea|"
    r"sunk|flooded|demolished|torn\s+down|blown\s+up)|collapses|collapsed|crumbles|crumbled|sinks|sank|"
    r"explodes|exploded|goes\s+up\s+in\s+flames|went\s+up\s+in\s+flames|falls\s+to\s+the|fell\s+to\s+the)",
    I,
)
PLACE_DESTROYED_BEFORE = re.compile(
    r"\b(?:burns?|burned|burnt|razes?|razed|destroys?|destroyed|levels?|levell?ed|sacks?|sacked|"
    r"torches?|torched|demolish(?:es|ed)?|blows?\s+up|blew\s+up|sets?\s+fire\s+to|set\s+fire\s+to|guts?|gutted|"
    r"consumes?|consumed|flattens?|flattened|obliterates?|obliterated|nothing\s+remains?\s+of|nothing\s+remained\s+of)"
    r"\s+(?:the\s+)?$",
    I,
)
ITEM_DESTROYED_AFTER = re.compile(
    GAP + r"(?:shatters?|shattered|breaks?\s+(?:apart|in\s+two)|broke\s+(?:apart|in\s+two)|"
    r"(?:is|was)\s+(?:\w+ly\s+)?(?:destroyed|shattered|broken|melted|burned|burnt)|"
    r"crumbles\s+to\s+dust|crumbled\s+to\s+dust|melts|melted)",
    I,
)
APPOSITIVE_AFTER = re.compile(r"^,\s+(?P<alias>the\s+(?:[a-z][\w'’-]*\s+){0,2}[a-z][\w'’-]*),")
APPOSITIVE_BEFORE = re.compile(r"^\s*(?P<alias>[Tt]he\s+(?:[a-z][\w'’-]*\s+){0,2}[a-z][\w'’-]*),\s+$")
NOT_ALIASES = re.compile(
    r"\b(?:morning|night|evening|day|dawn|dusk|noon|midnight|week|month|year|hour|moment|minute|time|end|"
    r"start|rest|way|meantime|while|dark|silence|chaos|crowd|room|hall|street|road|door|gate|square|end|man|woman|"
    r"person|stranger|figure|boy|girl|child|voice|someone|people|men|women|others)$",
    I,
)
KNOWN_AS_AFTER = re.compile(
    r"^,?\s+(?:also\s+|better\s+|once\s+)?(?:known\s+as|called|named|whom\s+\w+\s+call(?:s|ed)?|who\s+goes\s+by)\s+"
    r"(?P<alias>(?:the\s+)?[A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+){0,2})"
)
NAMED_BEFORE = re.compile(
    r"(?:^|[,;]\s*|\b(?:and|is|was)\s+)(?P<alias>[Tt]he\s+(?:(?!(?:the|a|an)\b)[a-z][\w'’-]*\s+){0,2}[a-z][\w'’-]*)"
    r"\s+(?:named|called)\s+$"
)
PLACE_TYPES = {"location", "place"}
# an item card by its name: thrown away ("throws Brightfang into the lake"), taken or given
ITEM_THROWN_BEFORE = re.compile(
    r"\b(?:throws?|threw|thrown|tosses|tossed|hurls?|hurled|casts?|flings?|flung|drops?|dropped)\s+(?:the\s+)?$", I
)
ITEM_THROWN_AFTER = re.compile(
    r"^\s+(?:away|overboard|into\s+the\s+(?:lake|river|sea|ocean|fire|flames|well|chasm|abyss|pit|furnace|"
    r"volcano|water|waves|deep|void)|(?:in|off)\s+(?:the\s+)?(?:lake|river|sea|cliff|bridge))",
    I,
)
ITEM_TAKEN_BEFORE = re.compile(
    r"\b(?:takes?|took|pockets?|pocketed|grabs?|grabbed|steals?|stole|snatch(?:es|ed)|seizes?|seized|lifts?|lifted|"
    r"picks?\s+up|picked\s+up|receives?|received|wins?|won|buys?|bought|inherits?|inherited|recovers?|recovered|"
    r"finds?|found|carries|carried|holds?|held|wears?|wore|keeps?|kept|bears?|bore|has|had)\s+(?:the\s+)?$",
    I,
)
# "named her lady of the chamber": a title given to a him or her (the character named last before it)
ROLE_TO_PRONOUN = re.compile(
    r"\b(?:names?|named|appoints?|appointed|crowns?|crowned|makes?|made|proclaims?|proclaimed|promotes?|promoted|"
    r"elects?|elected|dubs?|dubbed)\s+(?P<pronoun>him|her)\s+(?:as\s+|to\s+)?" + ROLE
)
# idioms a narrator uses, said the plain way the patterns read (the claim keeps the sentence as written)
IDIOMS = [
    (
        re.compile(
            r"\bpass(?:ed|es)\s+(?=(?:in\s+the\s+night|in\s+(?:his|her|their)\s+sleep|peacefully|quietly)\b)", I
        ),
        "died ",
    ),
    (re.compile(r"\b(?:did\s+not|didn't|did\s+n't)\s+survive\b", I), "died"),
    (re.compile(r"\bnever\s+(?:woke|wakes|recovered|recovers)(?:\s+up)?(?:\s+again)?\b", I), "died"),
    (re.compile(r"\b(?:lost|loses|gave|gives)\s+(?:his|her|their)\s+(?:life|lives)\b", I), "died"),
    (re.compile(r"\b(?:took|takes)\s+(?:his|her|their)\s+own\s+life\b", I), "died"),
    (
        re.compile(
            r"\b(?:fell|falls|has\s+fallen|had\s+fallen)\s+in\s+(?:the\s+)?(?:battle|fight|fighting|war|duel)\b", I
        ),
        "died in battle",
    ),
    (re.compile(r"\b(?:was|were|is)\s+never\s+seen\s+again\b", I), "went missing"),
    (re.compile(r"\b(?:made|makes)\s+(?:his|her|their)\s+way\s+(?:back\s+)?to\b", I), "went to"),
    (re.compile(r"\b(?:threw|throws)\s+in\s+(?:his|her|their)\s+lot\s+with\b", I), "joined"),
    (re.compile(r"\b(?:took|takes|ascended|ascends|claimed|claims)\s+the\s+throne\b", I), "was crowned monarch"),
    (re.compile(r"\b(?:is|was|has\s+been|had\s+been)\s+knighted\b", I), "was made a knight"),
    (re.compile(r"\b(?:set|sets)\s+free\b", I), "released"),
    (re.compile(r"\bfreed\b", I), "released"),
]
# "the wolves tore Bram apart", "shot Bram dead", "laid Bram to rest": a verb, the name, then these
DEATH_SPLIT_AFTER = re.compile(
    r"^(?-i:\s+[A-Z][\w'’-]+)??\s+(?:dead|to\s+death|to\s+pieces|apart|limb\s+from\s+limb|to\s+rest)\b", I
)
DEATH_SPLIT_BEFORE = re.compile(
    r"\b(?:shoots?|shot|beats?|beaten|stabs?|stabbed|tears?|tore|torn|rips?|ripped|hacks?|hacked|blows?|blew|strikes?|"
    r"struck|kicks?|kicked|bludgeons?|bludgeoned|lays?|laid|burns?|burned|burnt|starves?|starved|works?|worked)\s+$",
    I,
)
# a place stated as where someone is or lives now
STAYS_AFTER = re.compile(
    GAP + r"(?:(?:now\s+)?(?:is|was|are|were)\s+(?:now\s+|back\s+|already\s+|safely\s+|still\s+)?in|"
    r"(?:now\s+)?(?:lives?|lived|settles?|settled|stays?|stayed|remains?|remained|takes?\s+up\s+residence|"
    r"took\s+up\s+residence|makes?\s+(?:a\s+|her\s+|his\s+|their\s+)?home|made\s+(?:a\s+|her\s+|his\s+|their\s+)?home)"
    r"\s+(?:\w+ly\s+)?in)\s+" + PLACE_NAME,
)
STOWED_AFTER = re.compile(
    GAP
    + r"(?:slips?|slipped|tucks?|tucked|stows?|stowed|hides?|hid|hidden|thrusts?|thrust|stuffs?|stuffed)\s+"
    + ITEM
    + r"\s+(?:into|in|under|inside|beneath)\s+(?:his|her|their)\s+\w+"
)
ITEM_GONE_AFTER = re.compile(
    r"^\s+(?:is|was|has\s+been|had\s+been)\s+(?:\w+ly\s+)?(?P<how>stolen|taken|snatched|lost|pawned|sold|gone|missing)"
    r"(?:\s+from\s+(?P<owner>[A-Z][\w'’-]+))?",
    I,
)
MARRIED_PAIR_AFTER = re.compile(
    r"^\s+and\s+(?P<to>[A-Z][\w'’-]+)\s+(?:were|are|got|have\s+been|had\s+been)\s+(?:\w+ly\s+)?(?:married|wed)\b"
)
PLACE_TAKEN_AFTER = re.compile(
    GAP + r"(?:falls|fell|has\s+fallen|had\s+fallen)\s+to\s+(?P<by>(?:the\s+)?[A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+){0,3})"
)
PLACE_SWEPT_BEFORE = re.compile(r"\b(?:sweeps?|swept|washes?|washed|carries|carried)\s+(?:the\s+)?$", I)
PLACE_SWEPT_AFTER = re.compile(r"^\s+away\b", I)


def plainly(text: str) -> str:
    """``text`` with the narrator's idioms said the plain way (IDIOMS)."""
    for pattern, plain in IDIOMS:
        text = pattern.sub(plain, text)
    return text


# "the fishermen bring his body up": a body brought, found or buried is a death of its owner
PRONOUN_BODY = re.compile(
    r"\b(?:brings?|brought|carr(?:y|ies|ied)|finds?|found|pulls?|pulled|drags?|dragged|washe[sd]|recovers?|recovered|"
    r"buries|buried|fish(?:es|ed)?)\s+(?:up\s+|out\s+)?(?P<pronoun>his|her)\s+(?:\w+\s+)?(?:body|corpse|remains)\b",
    I,
)
PLACE_SUNK_AFTER = re.compile(
    GAP + r"(?:(?:is|was|lies|lay)\s+(?:now\s+)?gone\s+(?:beneath|under|into)|(?:falls?|fell|sinks?|sank|slides?|slid|"
    r"collapses?|collapsed|topples?|toppled)\s+into\s+the\s+(?:sea|waves|river|lake|marsh|abyss|chasm|flood|water))",
    I,
)
ITEM_STOLEN_BEFORE = re.compile(
    r"\b(?P<verb>[a-z]+)\s+(?:off|away)\s+with\s+(?:the\s+)?$|\b(?P<fled>escapes?|escaped|flees|fled)\s+with\s+(?:the\s+)?$",
    I,
)
# "Bell had Lowry locked in the freight car": a causative; the name, then what was done to it
CAUSED_BEFORE = re.compile(r"\b(?:has|had|have|gets?|got)\s+$", I)
CAUSED_AFTER = re.compile(
    r"^\s+(?P<how>locked\s+(?:up|in|away)|arrested|thrown\s+in(?:to)?|jailed|imprisoned|hanged|hung|shot|killed|"
    r"executed|beheaded)\b",
    I,
)
NOT_PLACES = re.compile(
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|January|February|March|April|May|June|July|August|"
    r"September|October|November|December|Christmas|Easter|Michaelmas|Midsummer|Midwinter|God|Heaven|Hell)$"
)
# what hedges only its own clause ("she flies to Lisbon and does not come back"): a negation, a
# modal, an attempt, a near miss
HEDGE_CLAUSE = re.compile(
    r"\b(?:will|would|could|might|may|shall|should|must|can|cannot|won't|wouldn't|not|never|n't|no\s+longer|"
    r"nobody|no\s+one|almost|nearly|tries|tried|attempts?|attempted|fails?|failed)\b|n't\b",
    I,
)
CLAUSE_BREAK = re.compile(r"(?:,\s*(?:and|but|then|so|yet)\s+|;\s*|:\s*|\s+(?:and|but)\s+(?=(?:he|she|they|[A-Z])))", I)


def clauses_masked(text: str) -> str:
    """``text`` with every clause a negation or a modal hedges blanked out (same length)."""
    out, at = [], 0
    for m in [*CLAUSE_BREAK.finditer(text), None]:
        end = m.start() if m else len(text)
        piece = text[at:end]
        out.append(" " * len(piece) if HEDGE_CLAUSE.search(piece) else piece)
        if m:
            out.append(m.group())
            at = m.end()
    return "".join(out)


# "unhooks the master key ... and hands it to Theo": "it" is the item named before it in the sentence
GIVEN_IT_BEFORE = re.compile(
    r"\b(?:gives?|gave|hands?|handed|passes|passed|entrusts?|entrusted|tosses|tossed)\s+it\s+to\s+$", I
)
