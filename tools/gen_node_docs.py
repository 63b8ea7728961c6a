"""Copy each node's help, web/docs/<NodeId>/en.md (the one source), to web/docs/<NodeId>.md.

The frontend's Info tab asks for /extensions/<pack>/docs/<NodeId>/<locale>.md first and falls back to
docs/<NodeId>.md, so English users get en.md with no 404 and other locales get the copy.
tests/core/test_pack_layout.py fails when a copy drifts. Run: python tools/gen_node_docs.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "web" / "docs"


def copies(docs: Path = DOCS) -> dict[Path, str]:
    """web/docs/<NodeId>.md -> the text it must hold (its node's en.md)."""
    return {docs / f"{source.parent.name}.md": source.read_text(encoding="utf-8")
            for source in sorted(docs.glob("*/en.md"))}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    for path, text in copies().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(DOCS.parents[1])}")


if __name__ == "__main__":
    main()
