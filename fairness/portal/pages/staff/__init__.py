"""The staff pages under /staff/: keys, tiers, alerts and the audit log, users, replicas, accounts,
budgets, tokens, sign-in mappings, storage, usage."""
