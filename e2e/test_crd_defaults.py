"""The checked-in CRD defaults (``webhook/core/crd_defaults.json``) are those of the CRD files of
the modules Kueue pins (needs Go, as the e2e build does): ``make crd-defaults-check`` as a test."""

from __future__ import annotations

import pytest

from e2e.crd_defaults import check

pytestmark = pytest.mark.e2e


def test_the_checked_in_crd_defaults_match_the_pinned_crds() -> None:
    diff = check()
    assert diff == [], "\n".join(diff[:40]) + "\nrun `make crd-defaults`"
