"""A local stand-in for the Hugging Face Hub's upload API, recording every call.

It speaks just enough of the protocol huggingface_hub's HfApi uses for create_repo + upload_folder:
POST /api/repos/create, POST /api/models/<repo>/preupload/<rev> (every file "regular", so contents
travel inline in the commit), POST /api/models/<repo>/commit/<rev> (NDJSON: a header line, then one
line per file with base64 content).
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Call:
    method: str
    path: str
    authorization: str | None
    body: bytes


@dataclass
class HubStandIn:
    calls: list[Call] = field(default_factory=list)
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo -> path -> content
    repos: set[str] = field(default_factory=set)
    refuse_token: str | None = None
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> HubStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                return

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                standin.calls.append(Call("GET", self.path, self.headers.get("Authorization"), b""))
                self._reply(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                auth = self.headers.get("Authorization")
                standin.calls.append(Call("POST", self.path, auth, body))
                if standin.refuse_token and auth == f"Bearer {standin.refuse_token}":
                    self._reply(401, {"error": "Invalid credentials"})
                    return
                path = self.path.split("?")[0]
                if path == "/api/repos/create":
                    request = json.loads(body)
                    repo = f"{request['organization']}/{request['name']}" if request.get("organization") else request["name"]
                    standin.repos.add(repo)
                    self._reply(200, {"url": f"{standin.endpoint}/{repo}", "name": repo})
                elif "/preupload/" in path:
                    files = json.loads(body)["files"]
                    self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
                elif "/commit/" in path:
                    repo = path.split("/api/models/")[1].split("/commit/")[0]
                    stored = standin.files.setdefault(repo, {})
                    for line in body.decode().splitlines():
                        item = json.loads(line)
                        if item.get("key") == "file":
                            stored[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    self._reply(200, {"commitUrl": f"{standin.endpoint}/{repo}/commit/0123abcd", "commitOid": "0123abcd" * 5})
                else:
                    self._reply(404, {"error": f"unknown route {path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
