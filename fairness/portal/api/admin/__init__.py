"""The admin JSON API under /api/admin/: staff sessions or admin tokens."""
