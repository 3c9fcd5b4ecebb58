"""The one naming rule for decoded payload fields: the name the archive stores a field's column under
(`stored_names`) and the catalog's column for it (`column_names`) agree, whatever the payload's names."""

from __future__ import annotations

import itertools
import random

import pytest

from s3_archive.model.columns import COLUMN, column_names, stored_names

ENVELOPE = ["key", "value", "headers", "topic", "partition", "offset", "timestamp", "timestamp_type"]


@pytest.mark.parametrize(("names", "taken", "expected"), [
    (["id", "ID"], [], {"id": "id", "ID": "id_2"}),
    (["ID", "id"], [], {"ID": "id_2", "id": "id"}),  # the order of the fields does not matter
    (["userId", "name"], [], {"userId": "userId", "name": "name"}),  # no clash: names are kept as they are
    (["Id", "ID"], [], {"ID": "ID", "Id": "id_2"}),  # neither is lowercase: the first by name keeps its own
    (["a`b", "a.b", "a b", "é"], [], {"a`b": "a`b", "a.b": "a.b", "a b": "a b", "é": "é"}),  # odd but distinct
    (["a b", "A B"], [], {"a b": "a b", "A B": "a_b_2"}),
    (["Offset"], ENVELOPE, {"Offset": "offset_2"}),  # a kept envelope column after case folding
    (["a", "A", "A_2"], [], {"a": "a", "A": "a_2", "A_2": "a_2_2"}),  # a rename never takes another's name
    (["a", "A", "a_2"], [], {"a": "a", "A": "a_3", "a_2": "a_2"}),
    (["value_id", "value_ID"], ENVELOPE, {"value_id": "value_id", "value_ID": "value_id_2"}),  # prefixed names
])
def test_a_field_keeps_its_name_unless_another_differs_from_it_only_in_case(names, taken, expected):
    assert stored_names(names, taken) == expected


def test_the_catalog_maps_every_renamed_stored_name_to_itself():
    """The catalog (catalog/tables.py::decoded_columns) applies `column_names` to the stored names it finds in the
    manifests: a column the archive renamed is the table's column of that name, so the table reads it."""
    alphabet = ["a", "A", "a_2", "A_2", "a_3", "a b", "A B", "a_b", "a_b_2", "x`y", "X`Y", "Offset", "offset_2",
                "1a", "é", "É", "e", "field", "", "Key", "KEY"]
    rng = random.Random(17)
    cases = [list(p) for r in (1, 2, 3) for p in itertools.permutations(alphabet, r)]
    cases += [rng.sample(alphabet, rng.randint(4, len(alphabet))) for _ in range(3000)]
    for names in cases:
        stored = stored_names(names, ENVELOPE)
        folded = [s.lower() for s in stored.values()]
        assert len(set(folded)) == len(folded), stored  # distinct in any case, so Spark and Athena resolve each
        assert not set(folded) & set(ENVELOPE), stored
        assert stored_names(names[::-1], ENVELOPE) == stored
        catalog = column_names(list(stored.values()), ENVELOPE)
        for field, name in stored.items():
            if name != field:
                assert catalog[name] == name and COLUMN.fullmatch(name), (names, stored)
