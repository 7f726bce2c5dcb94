"""Audit: what a built or published image still lacks of its distribution's security fixes,
and what advisories name among its packages."""
