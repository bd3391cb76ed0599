#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes docs/PARAMS.md from src/core/params.def, the one parameter table, and
src/core/params_test.def, its rows that only tests set.

Run it after adding a row; tests/test_params.cc fails while a row is undocumented.
"""
import pathlib
import re

root = pathlib.Path(__file__).resolve().parent.parent
ROW = re.compile(r'^RCN_PARAM\(\s*(\w+),\s*"(\w+)",\s*(\w+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)"\)', re.M)


def read_rows(name):
    return ROW.findall((root / "src/core" / name).read_text())


def table(rows):
    out = ["| variable | kind | default | allowed | meaning |", "|---|---|---|---|---|"]
    for _id, name, kind, default, allowed, doc in rows:
        shown = f"`{default}`" if default else "(empty)"
        values = f"`{allowed.replace('|', ', ')}`" if allowed else "0 or 1" if kind == "BOOL" else "any"
        out.append(f"| `ROCENANTE_{name}` | {kind.lower()} | {shown} | {values} | {doc.replace('|', '/')} |")
    return out


rows = read_rows("params.def")
test_rows = read_rows("params_test.def")
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
    "A communicator reads the parameters it uses while it is created (the log's are read once",
    "a process): a later change of the environment does not reach it.",
    "The guides and docs/design.md say more about each.",
    "",
    *table(rows),
    "",
    "## Testing aids",
    "",
    "Set by the tests and their scripts, not by users (`src/core/params_test.def`).",
    "",
    *table(test_rows),
    "",
]
(root / "docs/PARAMS.md").write_text("\n".join(lines))
print(f"wrote docs/PARAMS.md with {len(rows)} parameters and {len(test_rows)} testing aids")
