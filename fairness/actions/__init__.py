"""Every change people make, audited, in one place for the pages, the admin API and the commands:
one module per topic, each building on audit.py."""
