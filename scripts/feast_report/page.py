"""The report as written: report.html, summary.md and report.json in the output folder.

Owns the sections (heading, text, tables, facts, pictures, notes), saving a picture or noting
why not, and writing the three files: the HTML with every picture embedded (base64), the same
tables and fits in Markdown with the pictures linked, and the fitted numbers as JSON.
"""

import base64
import datetime
import html
import json
import re
import sys
from pathlib import Path

from .figures import Skip, save


def markdown_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out)


def html_table(header, rows):
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    def td(c):  # **bold** as Markdown writes it
        return "<td>" + re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(c)) + "</td>"
    body = "".join("<tr>" + "".join(td(c) for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


class Report:
    def __init__(self, out, title):
        self.out, self.title = out, title
        self.sections = []  # (heading, text paragraphs, tables [(header, rows)], pictures [(path, caption)], notes)
        self.numbers = {}
        self.stems = set()

    def section(self, heading, intro=""):
        s = {"heading": heading, "intro": intro, "tables": [], "pictures": [], "notes": [], "facts": []}
        self.sections.append(s)
        return s

    def picture(self, s, name, caption, build):
        """Draws build()'s figure into the output folder as name; a Skip becomes a note."""
        try:
            path = save(build(), self.out, name)
        except Skip as e:
            s["notes"].append(f"{caption}: not drawn: {e}")
            print(f"report: skipped {caption}: {e}", file=sys.stderr)
            return None
        s["pictures"].append((path, caption))
        print(f"report: {path}")
        return path

    def pictures(self, s, figures):
        """Each (file name, caption, build) of a section's figures, in order."""
        for name, caption, build in figures:
            self.picture(s, name, caption, build)

    def write(self):
        md = [f"# {self.title}", ""]
        parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>",
                 "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
                 "table{border-collapse:collapse;font-size:12px;margin:1em 0}td,th{border:1px solid #ccc;"
                 "padding:2px 6px;text-align:right}th{background:#f0f0f0}img{max-width:100%;margin:0.5em 0}"
                 ".note{color:#a33}.fact{font-family:monospace}</style></head><body>",
                 f"<h1>{html.escape(self.title)}</h1>",
                 f"<p>Generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by scripts/report.py.</p>"]
        for s in self.sections:
            md += [f"## {s['heading']}", ""]
            parts.append(f"<h2>{html.escape(s['heading'])}</h2>")
            if s["intro"]:
                md += [s["intro"], ""]
                parts.append(f"<p>{html.escape(s['intro'])}</p>")
            for header, rows in s["tables"]:
                md += [markdown_table(header, rows), ""]
                parts.append(html_table(header, rows))
            for fact in s["facts"]:
                md += [f"- {fact}"]
                parts.append(f"<p class='fact'>{html.escape(fact)}</p>")
            if s["facts"]:
                md.append("")
            for path, caption in s["pictures"]:
                data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
                md += [f"![{caption}]({Path(path).name})", ""]
                parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
                             f"<figcaption>{html.escape(caption)} ({html.escape(Path(path).name)})</figcaption></figure>")
            for note in s["notes"]:
                md += [f"- *{note}*"]
                parts.append(f"<p class='note'>{html.escape(note)}</p>")
            md.append("")
        parts.append("</body></html>")
        (self.out / "report.html").write_text("\n".join(parts))
        (self.out / "summary.md").write_text("\n".join(md))
        with open(self.out / "report.json", "w") as f:
            json.dump(self.numbers, f, indent=1, default=float)
        print(f"report: {self.out / 'report.html'} ({sum(len(s['pictures']) for s in self.sections)} pictures)")
