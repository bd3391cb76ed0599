#!/usr/bin/env python3
"""Writes docs/PARAMS.md from src/core/params.def, the one parameter table.

Run it after adding a row; tests/test_params.cc fails while a row is undocumented.
"""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
rows = re.findall(r'^RCN_PARAM\(\s*(\w+),\s*"(\w+)",\s*(\w+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)"\)',
                  (root / "src/core/params.def").read_text(), re.M)
lines = [
    "# Parameters",
    "",
    "Every tunable is an environment variable read through one table, `src/core/params.def`.",
    "This page is generated from it by `scripts/gen-params-doc.py`.",
    "Integers are decimal (hexadecimal after 0x) with an optional K, M or G suffix (powers of 1024); booleans accept 0/1, true/false, yes/no, on/off.",
    "A malformed value, or one outside the row's allowed values (an integer's range, both ends",
    "included; a string's choices), is an error at communicator creation that names the variable;",
    "an unknown `ROCENANTE_*` name is logged as a warning (a likely typo).",
    "A string with choices that is set but empty reads as its default.",
    "",
    "| variable | kind | default | allowed | meaning |",
    "|---|---|---|---|---|",
]
for _id, name, kind, default, allowed, doc in rows:
    shown = f"`{default}`" if default else "(empty)"
    values = f"`{allowed.replace('|', ', ')}`" if allowed else "0 or 1" if kind == "BOOL" else "any"
    lines.append(f"| `ROCENANTE_{name}` | {kind.lower()} | {shown} | {values} | {doc.replace('|', '/')} |")
lines.append("")
(root / "docs/PARAMS.md").write_text("\n".join(lines))
print(f"wrote docs/PARAMS.md with {len(rows)} parameters")
