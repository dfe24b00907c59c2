"""A password hasher for the suite: production's PBKDF2-SHA256 at a single iteration.

Production's 1,000,000-odd iterations cost about 0.4 s of CPU a password, and the suite makes and
checks a password in some hundreds of tests (the staff fixture alone: 0.43 of a test's 0.9 s).
The stored form is the one production writes, `pbkdf2_sha256$1$<salt>$<hash>`, and Django reads
the iteration count back from it, so the gateways the suite starts (on the production settings)
check these passwords with their own hasher, and upgrade them on a sign-in as they would any old
hash."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
