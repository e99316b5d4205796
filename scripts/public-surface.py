#!/usr/bin/env python3
"""Count a crate's public surface from its rustdoc output: every documented item (struct,
enum, trait, function, type alias, constant, static, macro) plus the inherent methods of
structs and enums and the methods of traits. Redirect pages (an item re-exported from a
private module) are not counted twice; methods from blanket and trait implementations are
not counted.

    rm -rf target/doc/windlass && cargo doc -p windlass --no-deps
    python3 scripts/public-surface.py target/doc/windlass          # the total
    python3 scripts/public-surface.py target/doc/windlass --modules  # per module

The figure tracks issue 19's "half the public surface": 815 at b8d9ce1, default features.
"""

import os
import re
import sys

KINDS = ("struct", "enum", "trait", "fn", "type", "constant", "static", "macro")
IMPL_ENDS = ('id="trait-implementations"', 'id="synthetic-implementations"',
             'id="blanket-implementations"')


def count_page(kind, html):
    """1 for the item, plus its own methods."""
    if kind in ("struct", "enum"):
        start = html.find('id="implementations-list"')
        if start < 0:
            return 1
        ends = [e for e in (html.find(marker, start) for marker in IMPL_ENDS) if e >= 0]
        end = min(ends) if ends else len(html)
        return 1 + len(re.findall(r'id="method\.', html[start:end]))
    if kind == "trait":
        own = html.split('id="implementors"')[0]
        return 1 + len(re.findall(r'id="(?:tymethod|method)\.', own))
    return 1


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    per_module = {}
    for directory, _, files in os.walk(root):
        module = os.path.relpath(directory, root)
        for name in files:
            kind = name.split(".")[0]
            if not name.endswith(".html") or kind not in KINDS:
                continue
            with open(os.path.join(directory, name), errors="ignore") as page:
                html = page.read()
            if 'http-equiv="refresh"' in html[:600]:
                continue
            per_module[module] = per_module.get(module, 0) + count_page(kind, html)
    if "--modules" in sys.argv:
        for module, count in sorted(per_module.items(), key=lambda m: -m[1]):
            print(f"{count:5d} {module}")
    print(sum(per_module.values()))


if __name__ == "__main__":
    main()
