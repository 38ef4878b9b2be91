"""The tables of an HTML page as the page tests read them (shared by tests/test_page*.py)."""

from __future__ import annotations

from html.parser import HTMLParser


class Tables(HTMLParser):
    """Every <table> of a page: its attributes and rows of (text, attributes) cells; <br> read as a newline."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.cell: dict | None = None
        self.caption = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append({"attrs": attrs, "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append({"attrs": attrs, "cells": []})
        elif tag in ("td", "th") and self.tables:
            self.cell = {"tag": tag, "attrs": attrs, "text": "", "links": []}
            self.tables[-1]["rows"][-1]["cells"].append(self.cell)
        elif tag == "a" and self.cell is not None:
            self.cell["links"].append(attrs)
        elif tag == "br" and self.cell is not None:
            self.cell["text"] += "\n"
        elif tag == "caption":
            self.caption = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.cell = None
        elif tag == "caption":
            self.caption = False

    def handle_data(self, data):
        if self.cell is not None and not self.caption:
            self.cell["text"] += data

    def keyed(self, key: str) -> list[dict]:
        return [t for t in self.tables if t["attrs"].get("data-table") == key]


def body_texts(table: dict) -> list[list[str]]:
    """The texts of a table's body rows (the header row left out)."""
    return [
        [c["text"] for c in row["cells"]] for row in table["rows"] if row["cells"] and row["cells"][0]["tag"] == "td"
    ]
