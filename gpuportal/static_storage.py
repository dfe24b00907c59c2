"""Static files under content-hashed names, gzip-compressed beside them (WhiteNoise serves the
compressed file to a browser that accepts it, and marks hashed names cacheable forever).

`collectstatic` writes the hashed and compressed copies into STATIC_ROOT (`make demo`, the
Dockerfile and the tests run it). A checkout where it has not run still serves its pages: a name
missing from the manifest falls back to the plain file, which WhiteNoise serves from the finders,
uncompressed and briefly cached.
"""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:  # not collected (no collectstatic yet): the plain name
            return name
