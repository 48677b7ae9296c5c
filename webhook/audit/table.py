"""The audit as kubectl prints a listing: upper-case headers, columns three spaces apart."""

from __future__ import annotations

from collections.abc import Sequence

from webhook.audit.verdicts import Audited


def table(audited: Sequence[Audited], all_namespaces: bool, wide: bool = False) -> str:
    """NAMESPACE (with -A, as kubectl) KIND NAME VERDICT FINDINGS (codes), and with `wide` the
    first finding's MESSAGE."""
    header = ["KIND", "NAME", "VERDICT", "FINDINGS"]
    header = ["NAMESPACE", *header] if all_namespaces else header
    rows = [header + (["MESSAGE"] if wide else [])]
    for a in audited:
        row = [a.kind, a.name, a.verdict, ",".join(a.codes) or "<none>"]
        row = [a.namespace or "<cluster>", *row] if all_namespaces else row
        if wide:
            row.append(a.findings[0].message if a.findings else "")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)] + [r[-1]]
        lines.append("   ".join(cells).rstrip() + "\n")
    return "".join(lines)
