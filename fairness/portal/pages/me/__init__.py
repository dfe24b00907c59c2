"""A signed-in person's own pages under /me/: their keys, usage, tier and password."""
