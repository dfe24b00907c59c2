"""Signing in: passwords with a limit on attempts, the institution's OpenID provider and LDAP
directory, and the memberships their groups give."""
