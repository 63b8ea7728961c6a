"""ComfyUI's free-memory request clears the retake store: a middleware on ComfyUI's web server watches `POST /free` (and `/api/free`).

ComfyUI's "free model and node cache" (the /free endpoint with `free_memory`) sets a flag that its prompt worker
reads between prompts (`executor.reset()`: the node output cache, the Retakes node's cache with it, is dropped);
there is no callback a custom node may register for it, and the flag is consumed before any node runs again. The
request itself is the one place to see it: `watch_free_requests` (called once from the extension's `on_load`,
before the server starts) appends an aiohttp middleware to ComfyUI's app that lets ComfyUI's own handler answer
and then, when it accepted a request with `free_memory`, removes the durable store (`segments.retake_store`) from
ComfyUI's temp folder. It adds to the app's middleware list (an aiohttp seam, like a node pack's routes) and
replaces nothing; `unload_models` alone keeps the store (the models are unloaded, the segments stay valid).
"""

from __future__ import annotations

import asyncio
import logging

from ...segments.retake_store import clear_store

__all__ = ["watch_free_requests", "clear_retakes"]

_MARK = "_longmedia_clears_retakes"
FREE_PATHS = ("/free", "/api/free")   # ComfyUI serves each route bare and under /api (its frontend calls /api/free)


def clear_retakes() -> None:
    """Remove every stored retake segment from ComfyUI's temp folder."""
    import folder_paths

    clear_store(folder_paths.get_temp_directory())


def watch_free_requests(app=None) -> bool:
    """Watch ComfyUI's /free requests on `app` (None: the running PromptServer's); False where it cannot (no
    server, or one already started)."""
    from aiohttp import web

    if app is None:
        from server import PromptServer

        app = getattr(getattr(PromptServer, "instance", None), "app", None)
    if app is None or app.frozen:
        logging.info("LongMedia: retakes are not cleared by ComfyUI's free-memory request (no server to watch)")
        return False
    if any(getattr(m, _MARK, False) for m in app.middlewares):
        return True

    @web.middleware
    async def clear_retakes_on_free(request, handler):
        if request.method != "POST" or request.path not in FREE_PATHS:
            return await handler(request)
        try:
            body = await request.json()   # read once; aiohttp keeps the body for ComfyUI's handler
        except ValueError:   # named: not JSON; ComfyUI's handler answers it
            body = None
        response = await handler(request)
        if isinstance(body, dict) and body.get("free_memory") and response.status == 200:
            await asyncio.get_running_loop().run_in_executor(None, clear_retakes)
            logging.info("LongMedia: ComfyUI's free-memory request cleared the retake store")
        return response

    setattr(clear_retakes_on_free, _MARK, True)
    app.middlewares.append(clear_retakes_on_free)
    return True
