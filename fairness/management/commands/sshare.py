import dataclasses
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from fairness.portal.reports.fair_share import Row, rows

# Slurm's `sshare -l` headings (EffectvUsage is spelled as Slurm spells it), with their widths.
COLUMNS = (("RawShares", 10), ("NormShares", 11), ("RawUsage", 11), ("EffectvUsage", 13), ("FairShare", 10))


class Command(BaseCommand):
    help = ("Where every account and user stands, like Slurm's `sshare -l`: NormShares is the share "
            "S of the whole card, EffectvUsage the part U of everyone's decayed usage, and "
            "FairShare F = 2^(-U/S): 1 for nothing used, 0.5 for exactly one's share.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="The rows as JSON (the admin API's GET /api/admin/accounts gives the same).")

    def handle(self, *args: Any, as_json: bool, **options: Any) -> None:
        table = rows()
        self.stdout.write(json.dumps([dataclasses.asdict(row) for row in table], indent=2) if as_json
                          else as_table(table))


def as_table(table: list[Row]) -> str:
    """Accounts indented by their depth, each followed by its members one step further in."""
    names = [" " * row.depth + row.account for row in table]
    account_width = max([20, *map(len, names)])
    user_width = max([10, *(len(row.user) for row in table)])
    heading = [f"{'Account':<{account_width}} {'User':<{user_width}}",
               *(f"{title:>{width}}" for title, width in COLUMNS)]
    rule = ["-" * account_width + " " + "-" * user_width, *("-" * width for _, width in COLUMNS)]
    lines = [" ".join(heading), " ".join(rule)]
    for name, row in zip(names, table, strict=True):
        figures = (f"{row.raw_shares}", f"{row.norm_shares:.6f}", f"{row.raw_usage:.0f}",
                   f"{row.effective_usage:.6f}", f"{row.fair_share:.6f}")
        lines.append(" ".join([f"{name:<{account_width}} {row.user:<{user_width}}",
                               *(f"{figure:>{width}}" for figure, (_, width) in zip(figures, COLUMNS, strict=True))]))
    if not table:
        lines.append("(no accounts yet: `manage.py add_account` adds one)")
    return "\n".join(lines)
