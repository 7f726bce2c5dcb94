"""A package index's project page (the "simple" API) as typed file records. Pure.

Two formats answer the same question, "which files does this project have": PEP 691's JSON
(`application/vnd.pypi.simple.v1+json`) and PEP 503's HTML (an anchor per file). Both may say
where a wheel's METADATA is served on its own (PEP 658/714: `core-metadata`,
`data-core-metadata`, and the older `dist-info-metadata` spelling), so that nobody downloads a
wheel of half a gigabyte to read 40 KB of text. What is malformed is refused with the URL, what
is wrong and what to do, in one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

from imagekit.errors import InputError

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("text/html", "application/vnd.pypi.simple.v1+html")
# What the adapter asks for: JSON first, HTML where the index has nothing else.
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    """One file a project page lists: its name, where it is, its sha256 ("" when the index
    gives none) and, where the index serves it on its own, where its METADATA is (PEP 658)."""

    filename: str
    url: str
    sha256: str
    metadata_url: str | None
    metadata_sha256: str
    index: str  # the page that listed it

    @property
    def source(self) -> str:
        """`filename sha256:...`: how a proposal names where a fact came from."""
        return f"{self.filename} sha256:{self.sha256 or 'unknown'}"


def project_url(index: str, project: str) -> str:
    """The project page under an index's base URL (`.../simple` -> `.../simple/torch/`)."""
    return index.rstrip("/") + f"/{project}/"


def _refuse(url: str, what: str) -> InputError:
    return InputError(f"{url}: {what}; check that --index names a simple index (…/simple)")


def _metadata(value: object, url: str) -> tuple[str | None, str]:
    """PEP 658's attribute: absent/false (no file), true (a file, no hash) or {hash: value}."""
    if value in (None, False, "false"):
        return None, ""
    hashes = value if isinstance(value, dict) else {}
    if isinstance(value, str) and "=" in value:  # HTML: "sha256=<hex>"
        name, _, digest = value.partition("=")
        hashes = {name: digest}
    return url + ".metadata", str(hashes.get("sha256", ""))


def parse_project_page(url: str, content_type: str, body: bytes) -> tuple[IndexFile, ...]:
    """Every file `url`'s project page lists, in its order. Raises `InputError` on a page
    that is neither PEP 691 JSON nor PEP 503 HTML, or that lists no file at all."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_TYPE or kind.endswith("+json") or kind == "application/json":
        files = _from_json(url, body)
    elif kind in HTML_TYPES or kind.endswith("+html"):
        files = _from_html(url, body)
    else:
        raise _refuse(url, f"answered {kind or 'no content type'}, not a simple page")
    if not files:
        raise _refuse(url, "lists no files")
    return files


def _from_json(url: str, body: bytes) -> tuple[IndexFile, ...]:
    try:
        page = json.loads(body)
        entries = page["files"]
        found = []
        for entry in entries:
            link = urljoin(url, entry["url"])
            meta = entry.get("core-metadata", entry.get("dist-info-metadata"))
            metadata_url, metadata_sha = _metadata(meta, link)
            sha = str((entry.get("hashes") or {}).get("sha256", ""))
            found.append(IndexFile(entry["filename"], link, sha, metadata_url, metadata_sha, url))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else type(exc).__name__
        raise _refuse(url, f"is not a PEP 691 page ({what})") from None
    return tuple(found)


class _Anchors(HTMLParser):
    """The anchors of a PEP 503 page: (href, text, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.open, self.text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self.open is not None:
            self.text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self.open is not None:
            self.found.append(("".join(self.text).strip(), self.open))
            self.open = None


def _from_html(url: str, body: bytes) -> tuple[IndexFile, ...]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse(url, "is not UTF-8 text") from None
    parser = _Anchors()
    parser.feed(text)
    parser.close()
    found = []
    for name, attrs in parser.found:
        href = attrs.get("href")
        if not href or not name:
            raise _refuse(url, f"has an anchor without a file name or href ({name or href!r})")
        link, fragment = urldefrag(urljoin(url, href))
        algorithm, _, digest = fragment.partition("=")
        # A bare attribute (no value) means "true", as in HTML.
        keys = [k for k in ("data-core-metadata", "data-dist-info-metadata") if k in attrs]
        meta = (attrs[keys[0]] or "true") if keys else None
        metadata_url, metadata_sha = _metadata(meta, link)
        sha = digest if algorithm == "sha256" else ""
        found.append(IndexFile(name, link, sha, metadata_url, metadata_sha, url))
    return tuple(found)
