"""Checks every relative link of the project's Markdown: README.md, docs/ and bench/.

A link `[text](path#anchor)` must name a file that exists, relative to the page, and an anchor
must be a heading of that file (GitHub's slugs: lowercase, punctuation dropped, spaces as
hyphens). Links to other sites are not followed. Prints each broken link with its page and line;
exits 1 when there is one.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def slug(heading):
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for target in LINK.findall(line):
            yield number, target


def broken(page, target):
    if re.match(r"^[a-z]+:", target):
        return None
    file, _, anchor = target.partition("#")
    where = (page.parent / file).resolve() if file else page
    if not where.exists():
        return f"no such file: {file}"
    if anchor and where.is_file() and where.suffix == ".md" and anchor not in anchors(where):
        return f"no heading #{anchor} in {where.relative_to(ROOT)}"
    return None


def main():
    bad = 0
    for page in PAGES:
        for number, target in links(page):
            why = broken(page, target)
            if why:
                bad += 1
                print(f"{page.relative_to(ROOT)}:{number}: ({target}) {why}")
    checked = ", ".join(str(p.relative_to(ROOT)) for p in PAGES)
    print(f"links: {'ok' if bad == 0 else f'{bad} broken'} ({checked})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
