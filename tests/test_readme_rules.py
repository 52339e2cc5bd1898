"""The README's table of findings is the integrity policy (``integrity.RULES``), row for row: a
user reads there what a flag means and whether it voids the reward."""

from __future__ import annotations

import re

from maxcode.evaluate.integrity import RULES
from tests.helpers import REPO


def test_the_readmes_findings_table_is_the_policy() -> None:
    rows = re.findall(
        r"^\| `([a-z-]+):` \| (void|warn) \| (.+?) \|$", (REPO / "README.md").read_text(), re.M
    )
    table = {category: (consequence, meaning) for category, consequence, meaning in rows}
    policy = {category: (rule.consequence, rule.meaning) for category, rule in RULES.items()}
    assert table == policy
