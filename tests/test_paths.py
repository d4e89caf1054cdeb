"""Key paths: a validation error's location written as a reader writes it (webhook.core.objects.paths)."""

from __future__ import annotations

import pytest

from webhook.core.objects.paths import field_path


@pytest.mark.parametrize(
    ("loc", "prefix", "expected"),
    [
        (("teams", 0, "team"), "", "teams[0].team"),
        (("teams", 0, "team"), "quotas.json", "quotas.json.teams[0].team"),
        ((0, "Name"), "quotas.json", "quotas.json[0].Name"),
        (("labels", "gpu", "[key]"), "", "labels.gpu"),
        ((), "quotas.json", "quotas.json"),
        ((), "", ""),
    ],
)
def test_field_path_writes_a_validation_location_as_a_reader_does(
    loc: tuple[int | str, ...], prefix: str, expected: str
) -> None:
    assert field_path(loc, prefix) == expected
