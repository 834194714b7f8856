"""The time-travel viewer at `/ui`: one HTML page and a small script, shipped in the package
(no CDN, works offline), reading and acting through the same HTTP API clients use; and the
API's reference at `/docs`: Swagger UI, shipped in the package too (`swagger/`, from the npm
package swagger-ui-dist, fetched by tools/swagger_ui.sh), drawn from `/openapi.json`.

Every path under `/ui` answers the same page; the script reads the path and draws the view
(threads, a thread's timeline, the state at a step, a diff of two steps). Everything from the
log is set as text, never parsed as HTML, and the Content-Security-Policy lets the page run
only its own script and style, and reach only its own server.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from agentlog.actors.http.errors import ApiError

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""What the viewer's pages may load and run: their own files, nothing inline."""
DOCS_CSP = CSP.replace("img-src 'self'", "img-src 'self' data:")
"""`/docs` likewise; Swagger UI's stylesheet draws its icons from `data:` images."""
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "docs.js": "text/javascript; charset=utf-8",
}
"""The files under `/ui/static/`, with their media types."""
SWAGGER = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "LICENSE": "text/plain; charset=utf-8",
    "NOTICE": "text/plain; charset=utf-8",
    "swagger-ui-bundle.js.LICENSE.txt": "text/plain; charset=utf-8",
    "VERSION": "text/plain; charset=utf-8",
}
"""Swagger UI's files under `/docs/assets/` (its version and licenses among them)."""

router = APIRouter(include_in_schema=False)


def _asset(name: str, folder: str = "static") -> bytes:
    return resources.files(__package__).joinpath(folder, name).read_bytes()


def _answer(body: bytes, media_type: str, csp: str = CSP) -> Response:
    return Response(
        body,
        media_type=media_type,
        headers={
            "Content-Security-Policy": csp,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache",
        },
    )


@router.get("/ui")
@router.get("/ui/threads/{thread_id}")
@router.get("/ui/threads/{thread_id}/state/{step}")
@router.get("/ui/threads/{thread_id}/diff")
async def page() -> Response:
    """The viewer's page; its script draws the view the path names."""
    return _answer(_asset("index.html"), "text/html; charset=utf-8")


@router.get("/ui/static/{name}")
async def asset(name: str) -> Response:
    """One of the viewer's own files."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise ApiError(404, "not_found", f"the viewer has no file {name!r}")
    return _answer(_asset(name), media_type)


@router.get("/docs")
async def docs() -> Response:
    """The API's reference, drawn by Swagger UI from `/openapi.json`."""
    return _answer(_asset("docs.html"), "text/html; charset=utf-8", DOCS_CSP)


@router.get("/docs/assets/{name}")
async def docs_asset(name: str) -> Response:
    """One of Swagger UI's files, as shipped in the package."""
    media_type = SWAGGER.get(name)
    if media_type is None:
        raise ApiError(404, "not_found", f"the API reference has no file {name!r}")
    return _answer(_asset(name, "swagger"), media_type, DOCS_CSP)
