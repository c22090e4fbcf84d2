"""Every branch reads exactly the story a player expects, whatever they do.

The model keeps each branch as an independent list of nodes (each node: kind,
takes, which take is live). The database shares rows between branches; after
every step each branch read through the lineage clause must equal the model.
"""

import copy
import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from stories.models import Action, Adventure, Branch
from stories.tree import history, lineage, writes
from tests.support.examples import examples

PLAYER_KINDS = ["do", "say", "story"]
MODEL_KINDS = ["ai", "continue"]
USER_NUMBERS = itertools.count()


class StoryTree(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        from django.contrib.auth import get_user_model

        self.counter = itertools.count()
        user = get_user_model().objects.create_user(username=f"player{next(USER_NUMBERS)}")
        self.adventure = Adventure.objects.create(owner=user, title="t")
        root = writes.adventure_start(adventure=self.adventure, opening="opening")
        self.model = {root.pk: [{"kind": "start", "takes": ["opening"], "live": 0}]}
        self.head = root.pk

    # ---- helpers
    def text(self):
        return f"text-{next(self.counter)}"

    @property
    def nodes(self):
        return self.model[self.head]

    def head_branch(self):
        return Branch.objects.get(pk=self.head)

    def db_node(self, depth):
        return lineage.node_at(self.head_branch(), depth)

    # ---- rules
    @rule(kind=st.sampled_from(PLAYER_KINDS + MODEL_KINDS))
    def place(self, kind):
        text = self.text()
        writes.place(adventure_id=self.adventure.pk, branch_id=self.head, kind=kind, text=text)
        self.nodes.append({"kind": kind, "takes": [text], "live": 0})

    @precondition(lambda self: self.nodes[-1]["kind"] in MODEL_KINDS)
    @rule()
    def retry(self):
        text = self.text()
        tip = self.db_node(len(self.nodes))
        writes.take_add(
            adventure_id=self.adventure.pk, branch_id=self.head, expected_tip_id=tip.pk, kind=tip.kind, text=text
        )
        node = self.nodes[-1]
        node["takes"].append(text)
        node["live"] = len(node["takes"]) - 1

    @precondition(lambda self: any(len(n["takes"]) > 1 for n in self.nodes))
    @rule(data=st.data())
    def select_take(self, data):
        depth = data.draw(st.sampled_from([i + 1 for i, n in enumerate(self.nodes) if len(n["takes"]) > 1]))
        node = self.nodes[depth - 1]
        index = data.draw(st.integers(0, len(node["takes"]) - 1))
        take = lineage.takes_at(self.head_branch(), depth)[index]
        writes.take_select(adventure_id=self.adventure.pk, action_id=take.pk)
        node["live"] = index

    @precondition(lambda self: len(self.nodes) > 1)
    @rule()
    def undo(self):
        history.node_undo(adventure_id=self.adventure.pk)
        self.nodes.pop()

    @rule(data=st.data())
    def edit(self, data):
        depth = data.draw(st.integers(1, len(self.nodes)))
        text = self.text()
        writes.edit(adventure_id=self.adventure.pk, action_id=self.db_node(depth).pk, text=text)
        node = self.nodes[depth - 1]
        node["takes"][node["live"]] = text

    @precondition(lambda self: len(self.nodes) > 1)
    @rule(data=st.data())
    def delete(self, data):
        depth = data.draw(st.integers(2, len(self.nodes)))
        writes.delete(adventure_id=self.adventure.pk, action_id=self.db_node(depth).pk)
        del self.nodes[depth - 1]

    @rule(data=st.data())
    def fork(self, data):
        depth = data.draw(st.integers(1, len(self.nodes)))
        node = self.nodes[depth - 1]
        index = data.draw(st.integers(0, len(node["takes"]) - 1))
        take = lineage.takes_at(self.head_branch(), depth)[index]
        new = writes.fork(adventure_id=self.adventure.pk, action_id=take.pk)
        story = copy.deepcopy(self.nodes[: depth - 1])
        if index == node["live"]:
            story.append(copy.deepcopy(node))
            # a player's action forks with the model's reply to it, so two actions never stand in a row
            after = self.nodes[depth] if depth < len(self.nodes) else None
            if node["kind"] in ("do", "say", "story") and after is not None and after["kind"] in MODEL_KINDS:
                story.append(copy.deepcopy(after))
        else:
            story.append({"kind": node["kind"], "takes": [node["takes"][index]], "live": 0})
        self.model[new.pk] = story
        self.head = new.pk

    @precondition(lambda self: len(self.model) > 1)
    @rule(data=st.data())
    def checkout(self, data):
        self.head = data.draw(st.sampled_from(sorted(self.model)))
        writes.checkout(adventure_id=self.adventure.pk, branch_id=self.head)

    @precondition(lambda self: len(self.model) > 1)
    @rule(data=st.data())
    def delete_branch(self, data):
        victim = data.draw(st.sampled_from(sorted(b for b in self.model if b != self.head)))
        writes.branch_delete(adventure_id=self.adventure.pk, branch_id=victim)
        del self.model[victim]

    # ---- what a player sees
    @invariant()
    def every_branch_reads_its_own_story(self):
        visible = Branch.objects.filter(adventure=self.adventure, internal=False)
        assert {b.pk for b in visible} == set(self.model)
        assert Adventure.objects.get(pk=self.adventure.pk).head_branch_id == self.head
        for branch in visible:
            expected = self.model[branch.pk]
            rows = list(lineage.story(branch))
            assert [r.depth for r in rows] == list(range(1, len(expected) + 1)), "depths must be contiguous"
            assert branch.tip_depth == len(expected)
            assert [(r.kind, r.text) for r in rows] == [(n["kind"], n["takes"][n["live"]]) for n in expected]
            # every take of every node on the path, losing ones too, in one read per branch
            takes = {}
            for row in Action.objects.filter(lineage.path_q(branch), adventure_id=self.adventure.pk).order_by(
                "depth", "created_at", "id"
            ):
                takes.setdefault(row.depth, []).append(row)
            assert sorted(takes) == list(range(1, len(expected) + 1)), "no node off the path, none missing"
            for depth, node in enumerate(expected, start=1):
                assert [t.text for t in takes[depth]] == node["takes"], f"takes at depth {depth}"
                assert sum(t.live for t in takes[depth]) == 1, "exactly one live take per node"
        # the reader the play page uses for a node's takes agrees, on the branch the player is on
        head = self.head_branch()
        for depth, node in enumerate(self.model[self.head], start=1):
            assert [t.text for t in lineage.takes_at(head, depth)] == node["takes"], f"takes_at({depth})"

    @invariant()
    def forks_see_ancestors_only_up_to_the_fork(self):
        for branch in Branch.objects.filter(adventure=self.adventure):
            for ancestor_id, cap in branch.lineage:
                assert cap <= branch.fork_depth, "an ancestor is never read past the fork point"
            assert not Action.objects.filter(branch=branch, depth__lte=branch.fork_depth).exists()


@pytest.mark.slow  # explored trees: `make test` runs it, `make test-quick` does not
@pytest.mark.django_db
def test_every_branch_reads_exactly_the_story_the_player_expects():
    run_state_machine_as_test(
        StoryTree,
        settings=settings(
            max_examples=examples(20),
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.django_db
def test_the_sql_form_of_the_lineage_clause_selects_the_same_rows(alice):
    from django.db import connection

    adventure = Adventure.objects.create(owner=alice, title="t")
    root = writes.adventure_start(adventure=adventure, opening="o")
    for n in range(6):
        writes.place(adventure_id=adventure.pk, branch_id=root.pk, kind="do", text=f"a{n}")
    root.refresh_from_db()
    mid = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(root, 5).pk)
    for n in range(3):
        writes.place(adventure_id=adventure.pk, branch_id=mid.pk, kind="do", text=f"b{n}")
    mid.refresh_from_db()
    leaf = writes.fork(adventure_id=adventure.pk, action_id=lineage.node_at(mid, 7).pk)
    writes.place(adventure_id=adventure.pk, branch_id=leaf.pk, kind="do", text="c")
    for branch in Branch.objects.filter(adventure=adventure):
        clause, params = lineage.path_sql(branch, table="a")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT a.id FROM stories_action a WHERE {clause} ORDER BY a.id", params)
            via_sql = [row[0] for row in cursor.fetchall()]
        via_q = list(Action.objects.filter(lineage.path_q(branch)).order_by("id").values_list("id", flat=True))
        assert via_sql == via_q and via_q
