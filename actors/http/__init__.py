"""The agent runtime over HTTP: `create_app(runtime)` (FastAPI), bearer tokens, webhooks.

Needs the `serve` extra: `pip install 'agentlog[serve]'`.
"""

from agentlog.actors.http.app import create_app
from agentlog.actors.http.tokens import Principal, TokenBook, hash_token

__all__ = ["Principal", "TokenBook", "create_app", "hash_token"]
