#!/usr/bin/env python3
"""Checks that rkit(7) documents every record the tools printed.

Usage: check_records_doc.py MAN_PAGE RECORDS.jsonl [SCHEMA...]

Each record's schema must have a subsection (.SS SCHEMA) in the page, and each of the
record's top-level fields must be named in that subsection in bold, the way the page
names fields: on a .B/.BR/.BI line or as \\fBfield\\fR. The SCHEMAs given must all occur
among the records (so that a command that stops printing one is noticed). Prints one line
per problem and exits 1 when there is any.
"""
import json
import re
import sys


def sections(page):
    """Subsection title's first word -> its text, up to the next .SS or .SH."""
    out, name, lines = {}, None, []
    for line in page.splitlines():
        if line.startswith(".SS ") or line.startswith(".SH "):
            if name:
                out[name] = "\n".join(lines)
            name = line[4:].strip().strip('"').split()[0] if line.startswith(".SS ") else None
            lines = []
        elif name:
            lines.append(line)
    if name:
        out[name] = "\n".join(lines)
    return out


def bold_words(text):
    """The words set in bold: on .B/.BR/.BI lines (their bold arguments) and \\fB...\\fR."""
    text = text.replace("\\-", "-").replace("\\&", "")
    words = set()
    for line in text.splitlines():
        m = re.match(r"^\.(B|BR|BI)\s+(.*)$", line)
        if m:
            args = re.findall(r'"[^"]*"|\S+', m.group(2))
            # .B: all bold; .BR and .BI alternate, starting in bold.
            picked = args if m.group(1) == "B" else args[::2]
            for a in picked:
                words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", a.strip('"')))
        for b in re.findall(r"\\fB(.*?)\\f[RPI]", line):
            words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", b))
    return words


def main():
    page = open(sys.argv[1], encoding="utf-8").read()
    wanted = set(sys.argv[3:])
    docs = sections(page)
    fields, seen = {}, set()
    with open(sys.argv[2], encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            schema = rec.get("schema")
            if not schema:
                print(f"records:{n}: no schema field")
                continue
            seen.add(schema)
            fields.setdefault(schema, set()).update(rec.keys())
    problems = [f"{s}: no record of it was printed" for s in sorted(wanted - seen)]
    for schema in sorted(fields):
        if schema not in docs:
            problems.append(f"{schema}: no .SS section in rkit(7)")
            continue
        named = bold_words(docs[schema])
        for field in sorted(fields[schema] - {"schema"}):
            if field not in named:
                problems.append(f"{schema}: field {field} is not in its rkit(7) section")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
