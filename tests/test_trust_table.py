"""The findings table on the Trust page (``docs/trust.md``) is the integrity policy
(``integrity.RULES``), row for row: a user reads there what a flag means and whether it voids
the reward. The page holds the table exactly as ``policy_table_markdown`` renders it."""

from __future__ import annotations

import re

from maxcode.harness.integrity import RULES, policy_table_markdown
from tests.helpers import REPO

PAGE = REPO / "docs" / "trust.md"


def test_the_trust_pages_findings_table_is_the_policy() -> None:
    text = PAGE.read_text()
    rows = re.findall(r"^\| `([a-z-]+):` \| (void|warn) \| (.+?) \|$", text, re.M)
    table = {category: (consequence, meaning) for category, consequence, meaning in rows}
    policy = {category: (rule.consequence, rule.meaning) for category, rule in RULES.items()}
    assert table == policy
    assert len(rows) == len(RULES), "a finding is listed twice"


def test_the_trust_page_shows_the_table_as_the_code_renders_it() -> None:
    assert policy_table_markdown() in PAGE.read_text()
