"""The run page's HTML, rendered from the site's view model (site/page.py). Pure.

Static and self-contained: styles inline, charts drawn as SVG here (no charting library to
vendor, nothing fetched, readable printed and from file://), a few lines of script for the
filters only, and the grid complete without them. Every value is escaped (autoescape).
"""

from __future__ import annotations

from functools import cache

import jinja2

from imagekit.resources import site_templates_dir
from imagekit.site.grid import CellState
from imagekit.site.page import Site

INDEX = "index.html"


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(site_templates_dir())),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_site(site: Site) -> dict[str, str]:
    """Every page of the site by its path under the site's root: `index.html`, the overview,
    and `image/<name>.html` per image. Same site in, same text out."""
    env = _environment()
    shared = {"site": site, "State": CellState}
    pages = {INDEX: env.get_template("index.html.j2").render(**shared)}
    image = env.get_template("image.html.j2")
    for page in site.pages:
        pages[page.href] = image.render(page=page, **shared)
    return pages
