"""A hot query's SQL compiled once: Django compiles a queryset every time it runs, and for a query
of a few subqueries and joined rows that is most of its cost (the turn's access query, with the
member's role and character, the party's turn mode, the owner's AI settings and the last prompt:
~2 ms of Python against ~0.2 ms for Postgres to answer it). Here the queryset is built and
compiled once per shape, with marker values where the call's values go; each call runs the same
SQL with its own values through the connection's cursor (so query counting, the statement
deadline and every execute wrapper still see it) and builds the rows as Django's ModelIterable
does: the model's fields, the select_related rows, the annotations.

    ACCESS = CompiledOnce(lambda adventure_id, user_id: Adventure.objects.filter(...))
    ACCESS.first(("play",), adventure_id=3, user_id=7)

The build function must put each value into the query as a parameter (filters and annotations do;
a value that changes the SQL's shape, like a flag choosing a join, belongs in the shape key), and
must not depend on the clock or on the database's contents. A text column's value works too (its
marker arrives as the marker number's text), and so does an array's element (``seen_by__contains=[v]``
is written ``@> ARRAY[%s]``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.base import ModelState
from django.db.models.query import get_related_populators
from django.db.models.signals import post_init, pre_init

# Marker values no real value takes, within every integer column's range, positive ones too: Django
# turns a lookup past a column's range into no rows at all (a negative depth: the clause dropped)
MARKER_BASE = 2_147_000_000


@dataclass(frozen=True)
class _Shape:
    sql: str
    params: tuple
    slots: tuple  # per parameter: the name of the value that goes there, or None (a constant)
    model: type
    init_list: list
    fields: tuple[int, int]
    populators: list
    annotations: dict
    converters: dict
    made: Callable  # a row's fields -> the model instance


def _maker(model: type, init_list: list, using: str) -> Callable:
    """How a row's fields become an instance: Model.from_db, or, when that would only set every
    field in turn (all of them read, no init signal listened to, neither overridden), the
    instance's dict filled in one step (a turn reads its window of 50-500 nodes: ~4 us a node
    through from_db, its field descriptors and two signals, ~1 us so)."""
    every = [f.attname for f in model._meta.concrete_fields]
    plain = (
        init_list == every
        and getattr(model.from_db, "__func__", None) is Model.from_db.__func__
        and model.__init__ is Model.__init__
        and not pre_init.has_listeners(model)
        and not post_init.has_listeners(model)
    )
    if not plain:
        return lambda fields: model.from_db(using, init_list, fields)
    new = model.__new__

    def made(fields):
        obj = new(model)
        obj.__dict__.update(zip(init_list, fields))
        obj._state = state = ModelState()
        state.adding, state.db = False, using
        return obj

    return made


class CompiledOnce:
    def __init__(self, build: Callable[..., QuerySet], using: str = "default"):
        self.build, self.using = build, using
        self.shapes: dict[Hashable, _Shape] = {}
        self.lock = threading.Lock()

    def _shape(self, shape: Hashable, names: tuple[str, ...]) -> _Shape:
        found = self.shapes.get((shape, names))
        if found is not None:
            return found
        markers = {name: MARKER_BASE + n for n, name in enumerate(names)}
        queryset = self.build(shape, **markers)
        compiler = queryset.query.get_compiler(using=self.using)
        sql, params = compiler.as_sql()
        by_value = {value: name for name, value in markers.items()}
        by_text = {str(value): name for name, value in markers.items()}  # a text column's marker, as Django prepared it
        slots = tuple(
            by_value.get(p)
            if isinstance(p, int) and not isinstance(p, bool)
            else by_text.get(p)
            if isinstance(p, str)
            else None
            for p in params
        )
        missing = set(names) - {s for s in slots if s}
        if missing:
            raise ValueError(f"these values are not parameters of the query: {sorted(missing)}")
        select, klass_info = compiler.select, compiler.klass_info
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        found = _Shape(
            sql=sql,
            params=tuple(params),
            slots=slots,
            model=klass_info["model"],
            init_list=[f[0].target.attname for f in select[start:end]],
            fields=(start, end),
            populators=get_related_populators(klass_info, select, self.using),
            annotations=dict(compiler.annotation_col_map or {}),
            converters=compiler.get_converters([s[0] for s in select]),
            made=_maker(klass_info["model"], [f[0].target.attname for f in select[start:end]], self.using),
        )
        with self.lock:
            self.shapes[(shape, names)] = found
        return found

    def first(self, shape: Hashable = None, **values):
        """The query's first row for ``values``, as a model instance (None: no row)."""
        rows = self._run(shape, values, many=False)
        return rows[0] if rows else None

    def all(self, shape: Hashable = None, **values) -> list:
        """Every row of the query for ``values``, as model instances, in the query's order."""
        return self._run(shape, values, many=True)

    def _run(self, shape: Hashable, values: dict, *, many: bool) -> list:
        s = self._shape(shape, tuple(sorted(values)))
        params = [values[slot] if slot else constant for slot, constant in zip(s.slots, s.params, strict=True)]
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(s.sql, params)
            rows = cursor.fetchall() if many else [r for r in [cursor.fetchone()] if r is not None]
        start, end = s.fields
        made = []
        for row in rows:
            if s.converters:  # as SQLCompiler.apply_converters, with this thread's connection
                row = list(row)
                for position, (converters, expression) in s.converters.items():
                    value = row[position]
                    for converter in converters:
                        value = converter(value, expression, connection)
                    row[position] = value
            obj = s.made(row[start:end])
            for populator in s.populators:
                populator.populate(row, obj)
            for name, position in s.annotations.items():
                setattr(obj, name, row[position])
            made.append(obj)
        return made
