"""The guide builds as a strict MkDocs site, offline, and the README stays a short front page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))


def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output, output
    # The API page is generated: it must hold the documented modules' functions, not be empty.
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("simulate", "continuized_nesterov", "parse_topology", "graph_quantities"):
        assert name in api, name


def test_the_readme_is_a_short_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    text = "\n".join(lines)
    # The two set-up commands, exactly.
    assert "python3 -m venv v && . v/bin/activate && pip install . && gossip up" in text
    assert "bash scripts/test" in text
    assert "docs/img/" in text  # one figure
    image = re.search(r"\]\((docs/img/[^)]+\.png)\)", text)
    assert image is not None
    assert (ROOT / image[1]).is_file()


def test_user_docs_never_point_to_the_spec_or_to_issues() -> None:
    # The specification lives outside the repository; an issue number means nothing to a reader.
    bad = re.compile(r"\bSPEC(\.md|\s+section)|\.\./shared|(?i:\bissues?\s*#?\d+)")
    hits = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in USER_PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)
        if bad.search(line)
    ]
    assert not hits, "\n".join(hits)
