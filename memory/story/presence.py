"""Who is in the scene, sentence by sentence, and able to perceive it: the reading
a careful reader does of a block, for the cast's memories (memory.story.cast).

The scene is where the protagonist is (the story is told from their side):
- **Moves.** The protagonist moves when the player's act says so ("go down to the garage
  with Keller", "ride for the wash", "go looking for Keller") or the narration does ("you
  slip into the study", "When you return, ..."), and when a passage opens somewhere else
  ("Out in the hallway, ...", "In the hangar, ..."): only those who come along ("with
  Keller", "you and Marguerite") stay; anyone may be found there.
- **Who enters.** A member enters when the narration names it (its name or keys, whole
  words), the protagonist speaks to it ("Ruiz, where is ...?"), or a pronoun standing for
  it acts. Not when it is only talked about: a name inside what someone says (quotes, or
  what follows "tells you that"), heard over an intercom, a radio or a call, written in a
  text, seen through a window or from downstairs, or only a possessive ("Ruiz's car").
- **Who leaves.** A member leaves when the narration says so with its name or a pronoun
  for it as the subject ("He pushes off the doorframe and heads out", "she excuses
  herself", "shuffles off to the privy", "stays in the car"); one who left comes back
  only when the text says so ("returns", "comes down the ladder") or the protagonist
  moves where it is.
- **Who perceives.** A member asleep, behind headphones, engrossed, or said to hear none
  of it perceives nothing; what is whispered or said in confidence reaches only those who
  take part in it.
Pronouns stand for the nearest member named before them whose pronouns fit (learnt from the
text: "Keller pulls the headphones down around his neck" makes Keller "he"). A block starts
with the scene as the LOOKBACK_BLOCKS blocks before it left it. The protagonist's own memory
is the adventure's bank: only the cast's cards are read here.
"""

from __future__ import annotations

import re

from memory.story import scene_words as words
from memory.story.scene import Member, Sentence, Witness, sentences_of
from stories.models import Action

CAST_MEMORIES_PER_BLOCK = 4  # members remembering one block, at most (the most present first)
LOOKBACK_BLOCKS = 2  # blocks read before one, for who is in the scene and who left


class Reader:
    """Reads sentences in story order, keeping who is here, gone, asleep or not hearing."""

    def __init__(self, cast: list[Member], *, name: str, sentences: list[Sentence]):
        self.cast = cast
        self.hero = re.compile(r"(?<!\w)" + re.escape(name) + r"(?!\w)")
        self.here: set[Member] = set()
        self.gone: set[Member] = set()
        self.asleep: set[Member] = set()
        self.deaf: set[Member] = set()
        self.recent: list[Member] = []  # the members mentioned, the most recent last
        self.loud = False  # the scene is loud: what two say to each other, only they hear
        self.genders = self._genders(sentences)

    # ---------------------------------------------------------------- the text
    def _genders(self, sentences: list[Sentence]) -> dict[Member, str]:
        """Each member's pronouns, by title or by the pronouns of sentences it alone is named in."""
        votes: dict[Member, dict[str, int]] = {m: {"m": 0, "f": 0} for m in self.cast}
        for m in self.cast:
            title = m.name.split()[0].rstrip(".").lower()
            if title in words.TITLES:
                votes[m][words.TITLES[title]] += 100
        for s in sentences:
            named = [m for m in self.cast if any(not self._possessive(s.narration, e) for _, e in m.spans(s.narration))]
            if len(named) != 1:
                continue
            for p in words.PRONOUN.finditer(s.narration):
                votes[named[0]][words.GENDER[p.group(1).lower()]] += 1
        return {m: ("m" if v["m"] > v["f"] else "f") for m, v in votes.items() if v["m"] != v["f"]}

    def _mentions(self, text: str) -> list[tuple[int, int, Member | None]]:
        """Members named in ``text`` and pronouns (``None`` member until resolved), in order."""
        found = [(s, e, m) for m in self.cast for s, e in m.spans(text)]
        found += [(p.start(), p.end(), None) for p in words.PRONOUN.finditer(text)]
        return sorted(found, key=lambda x: x[0])

    def _resolve(self, text: str, start: int, pronoun: str) -> Member | None:
        gender = words.GENDER.get(pronoun.lower())
        before = [(s, m) for m in self.cast for s, e in m.spans(text[:start]) if not self._possessive(text, e)]
        candidates = [m for _, m in sorted(before, key=lambda x: x[0])] or []
        order = list(reversed(self.recent + candidates))
        exact = next((m for m in order if self.genders.get(m) == gender), None)
        return exact or next((m for m in order if m not in self.genders), None)

    @staticmethod
    def _possessive(text: str, end: int) -> bool:
        return re.match(r"['’]s\b", text[end:]) is not None

    def _subject_of(self, text: str, at: int) -> Member | None | bool:
        """The member (name or pronoun) that is the subject of a verb at ``at``: the nearest mention
        before it that is not the object of a preposition; True for the protagonist."""
        before = text[:at]
        clause_start = max(before.rfind(";"), before.rfind(":"))
        best = None
        for s, e, m in self._mentions(before):
            if s <= clause_start or words.NOT_SUBJECT_BEFORE.search(before[:s]) or self._possessive(before, e):
                continue
            word = before[s:e].lower()
            if m is None and word not in ("he", "she"):
                continue
            best = (s, e, m)
        hero = [
            h
            for h in self.hero.finditer(before)
            if h.start() > clause_start
            and not self._possessive(before, h.end())
            and words.CLAUSE_OPENS.search(before[: h.start()])  # "hands you a glass": you are no subject
        ]
        if hero and (best is None or hero[-1].start() > best[0]):
            return True
        if best is None:
            return None
        s, e, m = best
        return m if m is not None else self._resolve(text, s, before[s:e])

    # ---------------------------------------------------------------- reading
    def read(self, sentences: list[Sentence]) -> dict[Member, Witness]:
        witnesses = {m: Witness(m) for m in self.cast}
        private: set[Member] | None = None
        absorbed: set[Member] = set()
        passage = -1
        passages: dict[int, str] = {}
        for s in sentences:
            passages[s.passage] = passages.get(s.passage, "") + " " + s.narration
        for s in sentences:
            if s.passage != passage:
                passage, private, absorbed, heard = s.passage, None, set(), []
                gone_before = set(self.gone)
            text = s.narration
            reported = self._reported_from(text)
            told = text[:reported]  # what the narration itself tells (not what someone says happened)
            remote = bool(words.REMOTE.search(told)) or bool(words.ELSEWHERE_OPENING.match(told))
            moved, companions, targets = self._hero_moves(s, told)
            if moved:
                self.here, self.gone, self.loud = set(companions), set(), False
            self.loud = self.loud or bool(words.LOUD.search(told))
            entering: set[Member] = set()
            if not remote:
                for st, en, m in self._mentions(told):
                    if m is None:
                        word = told[st:en].lower()
                        seen = word in ("him", "her") and words.PERCEIVED.search(told[:st])
                        if seen or (word in ("he", "she") and not words.NOT_SUBJECT_BEFORE.search(told[:st])):
                            m = self._resolve(told, st, word)
                        if m is None or m in self.gone:
                            continue
                    elif self._possessive(told, en) or m in targets:
                        continue
                    if m not in self.gone:
                        entering.add(m)
                entering |= {m for m in self._spoken_to(s) if m not in self.gone}
            arrivals = list(words.ARRIVE.finditer(told))
            vehicle = bool(words.VEHICLE_COMES.search(passages[passage]))
            if vehicle:
                arrivals += list(words.GETS_OUT.finditer(told))
            # found there: named in the narration after the passage began, without coming in, it was
            # there all along and heard what everyone heard ("... a sealed chamber. Helen photographs it.")
            # (by name: a pronoun for someone the text has not brought in finds no one)
            found = set()
            if s.kind not in (Action.Kind.DO, Action.Kind.SAY):
                found = {m for m in entering - self.here if m not in gone_before and m.spans(told)}
            for verb in arrivals:
                who = self._subject_of(told, verb.start())
                if isinstance(who, Member):
                    self.gone.discard(who)
                    entering.add(who)
                    found.discard(who)
            for m in found:
                if m not in self.asleep and m not in self.deaf:
                    witnesses[m].sentences += heard
                    witnesses[m].passages += [passage] * len(heard)
            self.here |= entering
            for st, en, m in self._mentions(told):
                if m is not None and m not in self.recent[-1:]:
                    self.recent = [x for x in self.recent if x is not m] + [m]
            speaker = self._subject_of(told, words.SPEECH.search(told).start()) if words.SPEECH.search(told) else None
            if words.PRIVATE.search(text):
                private = (private or set()) | ({speaker} if isinstance(speaker, Member) else set())
            elif private is not None and isinstance(speaker, Member):
                private.add(speaker)
            talk = None  # in a loud scene, what is said to someone reaches the speaker and whom it is said to
            if self.loud and speaker is not None and told != text and not words.ANNOUNCE.search(text):
                talk = {m for m in self.cast for _ in m.spans(told)} | (
                    {speaker} if isinstance(speaker, Member) else set()
                )
            for verb in words.ABSORBED.finditer(told):
                who = self._subject_of(told, verb.start())
                if isinstance(who, Member):
                    absorbed.add(who)
                    w = witnesses[who]
                    keep = [i for i, p in enumerate(w.passages) if p != passage]
                    w.sentences, w.passages = [w.sentences[i] for i in keep], [w.passages[i] for i in keep]
            for m in self.here:
                if m in self.asleep or m in self.deaf or m in absorbed:
                    continue
                if (private is not None and m not in private) or (talk is not None and m not in talk):
                    continue
                witnesses[m].sentences.append(s.text)
                witnesses[m].passages.append(passage)
            if private is None and talk is None:
                heard.append(s.text)
            for m in entering:
                witnesses[m].named += 1
            self._states(told)
            self._leaves(told, vehicle=vehicle)
        return witnesses

    def _reported_from(self, text: str) -> int:
        """Where what someone says begins in ``text`` ("tells you that ...", "says the road is out")."""
        for verb in words.SPEECH.finditer(text):
            rest = text[verb.end() :]
            if words.REPORTED.match(rest) and not re.match(
                r"\s*(?:to\s+)?(?:him|her|them)?\s*(?:goodbye|good\s+night)", rest
            ):
                return verb.end()
        return len(text)

    def _spoken_to(self, s: Sentence) -> set[Member]:
        """Members the speaker addresses by name at the start or the end of what is said."""
        out = set()
        for quote in re.finditer(r"[\"“]([^\"”]+)[\"”]?", s.text):
            said = quote.group(1)
            for m in self.cast:
                for st, en in m.spans(said):
                    if (st == 0 and re.match(r"\s*,", said[en:])) or (
                        re.search(r",\s*$", said[:st]) and re.match(r"\s*[.!?]*\s*$", said[en:])
                    ):
                        out.add(m)
        return out

    def _hero_moves(self, s: Sentence, told: str) -> tuple[bool, set[Member], set[Member]]:
        """Whether the protagonist moves in ``s``, who comes along, and whom they go looking for."""
        if s.first and s.kind not in (Action.Kind.DO, Action.Kind.SAY) and words.CUT.match(told):
            return True, set(), set()
        if s.kind == Action.Kind.DO and words.HERO_SLEEPS.search(s.raw):
            return True, set(), set()
        if s.kind == Action.Kind.DO:
            move = words.HERO_MOVE.search(s.raw)
            text = s.raw
        else:
            move = next((m for m in words.HERO_MOVE.finditer(told) if self._subject_of(told, m.start()) is True), None)
            text = told
            if move is None and re.search(r"\bWhen\s+" + self.hero.pattern + r"\s+return", told):
                return True, set(), set()
        if move is None or words.NOT_AWAY.match(text[move.end() :]):
            return False, set(), set()
        after = text[move.end() :]
        approached = [m for m in self.here for st, _ in m.spans(after) if st < 4]
        if re.match(r"\s*(?:over\s+)?to\s*$", text[move.start() : move.end()][-8:]) and approached:
            return False, set(), set()
        companions, targets = set(), set()
        for m in self.cast:
            for st, en in m.spans(text):
                if (
                    words.WITH.search(text[:st])
                    or re.match(r"\s+and\s+" + self.hero.pattern, text[en:])
                    or re.search(self.hero.pattern + r"\s+and\s+$", text[:st])
                ):
                    companions.add(m)
                elif st >= move.start():
                    targets.add(m)
        return True, {m for m in companions if m in self.here or m not in self.gone}, targets

    def _states(self, told: str) -> None:
        for pattern, on, off in (
            (words.SLEEP, self.asleep, None),
            (words.WAKE, None, self.asleep),
            (words.DEAF, self.deaf, None),
            (words.HEAR, None, self.deaf),
        ):
            for verb in pattern.finditer(told):
                who = self._subject_of(told, verb.start())
                if who is None and pattern is words.WAKE:  # "wake Petrov", "shake Petrov awake"
                    who = next((m for m in self.cast for st, _ in m.spans(told) if abs(st - verb.start()) < 25), None)
                if isinstance(who, Member):
                    if on is not None:
                        on.add(who)
                    if off is not None:
                        off.discard(who)

    def _joined(self, told: str, who: Member, at: int) -> set[Member]:
        """``who`` (the subject of a verb at ``at``) and the members joined to it by "and" or commas
        ("Bram and Cora ride off")."""
        out, start = {who}, None
        spans = sorted((s, e, m) for m in self.cast for s, e in m.spans(told[:at]))
        for s, e, m in reversed(spans):
            if m is who and start is None:
                start = s
            elif start is not None and re.fullmatch(r"\s*(?:,|and|,\s*and)\s*", told[e:start]):
                out.add(m)
                start = s
            elif start is not None:
                break
        return out

    def _leaves(self, told: str, *, vehicle: bool = False) -> None:
        for verb in words.LEAVE.finditer(told):
            if vehicle and words.GETS_OUT.match(told[verb.start() :]):
                continue  # out of the jeep that just pulled up: an arrival
            rest = told[verb.end() :]
            if words.NOT_AWAY.match(rest) or words.NOT_AWAY.match(told[verb.start() :].split(" ", 1)[-1]):
                continue
            if verb.group(0).lower().endswith("out") and words.GREETS.match(rest):
                continue  # coming out of another room to greet the protagonist: an arrival
            who = self._subject_of(told, verb.start())
            if isinstance(who, Member):
                for m in self._joined(told, who, verb.start()):
                    self.here.discard(m)
                    self.gone.add(m)
        for m in re.finditer(
            r"\b(?:asks?|tells?|sends?|orders?)\s+(\w+)\s+(?:to\s+(?:step|go|wait|head)\s+"
            r"(?:out|outside|away|off)|(?:down|out|off|away)\s+to)",
            told,
            words.I,
        ):
            word = m.group(1)
            who = (
                self._resolve(told, m.start(1), word)
                if word.lower() in words.GENDER
                else next((x for x in self.cast if x.spans(word)), None)
            )
            if who is not None:
                self.here.discard(who)
                self.gone.add(who)
        for m in re.finditer(r"\bshut\s+behind\s+(him|her)\b", told, words.I):
            who = self._resolve(told, m.start(1), m.group(1))
            if who is not None:
                self.here.discard(who)
                self.gone.add(who)


def present(*, cast: list[Member], actions: list[Action], before: list[Action], name: str) -> list[Witness]:
    """Each member's part of the block ``actions``, the most present first, at most
    CAST_MEMORIES_PER_BLOCK; members the block never shows are left out. ``before``: the
    LOOKBACK_BLOCKS blocks before it (oldest first), for who is already in the scene and who left."""
    if not cast:
        return []
    earlier, block = sentences_of(before, name=name), sentences_of(actions, name=name)
    reader = Reader(cast, name=name, sentences=earlier + block)
    reader.read(earlier)
    witnesses = reader.read(block)
    shown = [w for w in witnesses.values() if w.sentences]
    shown.sort(key=lambda w: (-w.named, -len(w.sentences), w.member.card_id))
    return shown[:CAST_MEMORIES_PER_BLOCK]
