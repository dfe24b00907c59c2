"""What the pages and APIs read and say beyond plain rows: usage, budgets, fair share, queries, a
tier's policy in words."""
