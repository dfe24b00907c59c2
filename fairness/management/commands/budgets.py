from typing import Any

from django.core.management.base import BaseCommand

from fairness.gateway.budget_rules import tokens_in_words
from fairness.portal.reports.budgets import all_lines


class Command(BaseCommand):
    help = ("Every token budget that still matters, with what its holder used (and holds in running "
            "requests), what is left, and when it resets. `manage.py set_budget` sets one.")

    def handle(self, *args: Any, **options: Any) -> None:
        table = all_lines()
        if not table:
            self.stdout.write("(no budgets: `manage.py set_budget` sets one)")
            return
        rows = [("Holder", "Period", "Limit", "Used", "Reserved", "Left", "%", "Resets / note")]
        for line in table:
            s = line.status
            period = line.budget.get_period_display()
            if line.budget.window_hours:
                period = f"{line.budget.window_hours} h rolling"
            note = line.resets_words
            if line.is_raise:
                note += f"; raise until {line.until_words}"
            if not line.in_force:
                note = "replaced by a raise for now"
            elif line.run_out_words:
                note += f"; {line.run_out_words}"
            rows.append((line.holder, period, tokens_in_words(line.limit), tokens_in_words(s.used),
                         tokens_in_words(s.reserved), tokens_in_words(s.left), line.percent, note))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        for row in rows:
            self.stdout.write("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
                              .rstrip())
