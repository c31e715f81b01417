"""GitHub-flavoured markdown -> HTML with GitHub's own cmark-gfm, and the HTML tables back
as lists of cell texts, to check report structure the way GitHub would render it."""
from __future__ import annotations

from html.parser import HTMLParser


class _Tables(HTMLParser):
    """Every <table> of an HTML document as {"head": [cells], "rows": [[cells], ...]}, where a
    cell is its text content; also collects every tag seen (to prove no HTML was injected)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[dict] = []
        self.tags: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self.tables.append({"head": [], "rows": []})
        elif tag == "thead":
            self._in_head = True
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            if self._in_head:
                self.tables[-1]["head"] = self._row
            else:
                self.tables[-1]["rows"].append(self._row)
            self._row = None
        elif tag == "thead":
            self._in_head = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def gfm_html(markdown: str) -> str:
    """As GitHub renders it: raw HTML kept (GitHub's sanitizer then keeps only its allowed
    tags, among them the report's ``<details>``/``<summary>``: issue 50), so a test sees
    every tag a report could carry and asserts the allowed set itself."""
    import cmarkgfm
    from cmarkgfm.cmark import Options
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def parse_html(html: str) -> _Tables:
    p = _Tables()
    p.feed(html)
    p.close()
    return p


def gfm_tables(markdown: str) -> list[dict]:
    """Render with GitHub's cmark-gfm and return the tables; asserts every row has exactly
    as many cells as the header (a stray ``|`` would add one)."""
    tables = parse_html(gfm_html(markdown)).tables
    for t in tables:
        for row in t["rows"]:
            assert len(row) == len(t["head"]), (t["head"], row)
    return tables
