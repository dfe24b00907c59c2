import dataclasses
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fairness.portal.reports.fair_share import Row, current_usage, narrowed, rows

# Slurm's headings (EffectvUsage is spelled as Slurm spells it) and widths; -l adds NormUsage and LevelFS.
WIDTHS = {"RawShares": 10, "NormShares": 11, "RawUsage": 11, "NormUsage": 11, "EffectvUsage": 13,
          "FairShare": 10, "LevelFS": 10}
SHORT = ("RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare")
LONG = ("RawShares", "NormShares", "RawUsage", "NormUsage", "EffectvUsage", "FairShare", "LevelFS")


def _names(text: str) -> set[str]:
    return {name.strip() for name in text.split(",") if name.strip()}


class Command(BaseCommand):
    help = ("Where every account and user stands, like Slurm's `sshare`: a root row, then each account "
            "(indented by depth) followed by its members. NormShares is the share S of the whole card; "
            "RawUsage is decayed weighted tokens (the unit of usage_report's Used) over all usage so far, "
            "each request's halved every GP_FAIRSHARE_HALF_LIFE_HOURS and a running one's counted at its "
            "estimate until it ends, so it has no period and is not usage_report's figure for one; "
            "EffectvUsage is U, the part of everyone's; FairShare F = 2^(-U/S): 1 for nothing used, 0.5 "
            "for exactly one's share. -l adds NormUsage (here the same as U) and LevelFS, S/U among "
            "siblings: above 1 under their share, inf for nothing used.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-l", "--long", action="store_true", help="Add NormUsage and LevelFS.")
        parser.add_argument("-a", "--all", action="store_true", dest="all_users",
                            help="Every user's row (the default here; narrowed by -u).")
        parser.add_argument("-u", "--users", metavar="LIST", help="Only these users' rows (comma-separated), "
                                                                  "under the accounts they are in.")
        parser.add_argument("-A", "--accounts", metavar="LIST",
                            help="Only these accounts (comma-separated) and what is under them.")
        parser.add_argument("-n", "--noheader", action="store_true", help="No heading lines.")
        shape = parser.add_mutually_exclusive_group()
        shape.add_argument("-p", "--parsable", action="store_true", help="Fields separated by |, with a | at the end.")
        shape.add_argument("-P", "--parsable2", action="store_true", help="Fields separated by |, none at the end.")
        shape.add_argument("--json", action="store_true", dest="as_json",
                           help="The rows as JSON (the admin API's GET /api/admin/accounts gives the same).")

    def handle(self, *args: Any, long: bool, users: str | None, accounts: str | None, noheader: bool,
               parsable: bool, parsable2: bool, as_json: bool, **options: Any) -> None:
        usage = current_usage()
        table = rows(usage)
        wanted_users, wanted_accounts = _names(users) if users else None, _names(accounts) if accounts else None
        unknown = sorted((wanted_accounts or set()) - {row.account for row in table})
        if unknown:
            raise CommandError(f"No account named {', '.join(unknown)}.")
        unknown = sorted((wanted_users or set()) - {row.user for row in table if row.user})
        if unknown:
            raise CommandError(f"{', '.join(unknown)}: a member of no account.")
        if wanted_users is not None or wanted_accounts is not None:
            table = narrowed(table, wanted_users, wanted_accounts)
        columns = LONG if long else SHORT
        if as_json:
            self.stdout.write(json.dumps([dataclasses.asdict(row) for row in table], indent=2))
        elif parsable or parsable2:
            self.stdout.write(as_parsable(table, usage.total, columns, header=not noheader, trailing=parsable))
        else:
            self.stdout.write(as_table(table, usage.total, columns, header=not noheader))


def root_figures(total: float) -> dict[str, str]:
    """Slurm's root row: no shares of its own, everything there is, nothing to rank it against."""
    return {"RawShares": "", "NormShares": "1.000000", "RawUsage": f"{total:.0f}", "NormUsage": "1.000000",
            "EffectvUsage": "1.000000", "FairShare": "", "LevelFS": ""}


def figures(row: Row) -> dict[str, str]:
    return {"RawShares": f"{row.raw_shares}", "NormShares": f"{row.norm_shares:.6f}",
            "RawUsage": f"{row.raw_usage:.0f}", "NormUsage": f"{row.norm_usage:.6f}",
            "EffectvUsage": f"{row.effective_usage:.6f}", "FairShare": f"{row.fair_share:.6f}",
            "LevelFS": "inf" if row.level_fs is None else f"{row.level_fs:.6f}"}


def lines_of(table: list[Row], total: float) -> list[tuple[str, str, dict[str, str]]]:
    """(Account as Slurm prints it, indented one step under root per depth; User; figures)."""
    return [("root", "", root_figures(total)),
            *((" " * (row.depth + 1) + row.account, row.user, figures(row)) for row in table)]


def as_parsable(table: list[Row], total: float, columns: tuple[str, ...], header: bool = True,
                trailing: bool = True) -> str:
    """-p and -P: Slurm keeps the indentation in the Account field."""
    end = "|" if trailing else ""
    out = ["|".join(("Account", "User", *columns)) + end] if header else []
    out += ["|".join((name, user, *(cells[c] for c in columns))) + end for name, user, cells in lines_of(table, total)]
    return "\n".join(out)


def as_table(table: list[Row], total: float, columns: tuple[str, ...] = SHORT, header: bool = True) -> str:
    """Accounts indented by their depth under root, each followed by its members one step further in."""
    lines = lines_of(table, total)
    account_width = max([20, *(len(name) for name, _, _ in lines)])
    user_width = max([10, *(len(user) for _, user, _ in lines)])
    out = []
    if header:
        out += [" ".join([f"{'Account':<{account_width}} {'User':<{user_width}}",
                          *(f"{title:>{WIDTHS[title]}}" for title in columns)]),
                " ".join(["-" * account_width + " " + "-" * user_width, *("-" * WIDTHS[title] for title in columns)])]
    for name, user, cells in lines:
        out.append(" ".join([f"{name:<{account_width}} {user:<{user_width}}",
                             *(f"{cells[title]:>{WIDTHS[title]}}" for title in columns)]))
    if not table:
        out.append("(no accounts yet: `manage.py add_account` adds one)")
    return "\n".join(out)
