#!/usr/bin/env python3
"""A GPU stand-in server, for checking Warden on a real GPU.

Not an inference server: it behaves like one as a process. An API parent
holds some CUDA memory and starts an engine child (same process group) that
holds more and runs matrix products until told to stop. /health answers 503
until the engine is ready, then 200; POST /v1/completions answers an
OpenAI-shaped completion after one matrix product. On SIGTERM the parent
stops accepting work, tells the engine to exit, waits for it and exits.
"""
import argparse
import http.server
import json
import os
import signal
import subprocess
import sys
import threading


def engine(mib):
    import torch
    hold = torch.empty(mib * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    stop = threading.Event()

    def watch_parent():
        sys.stdin.read()  # EOF: the parent asked us to stop, or died
        stop.set()

    threading.Thread(target=watch_parent, daemon=True).start()
    while not stop.is_set():
        c = a @ b
        torch.cuda.synchronize()
    del hold, c


def serve(args):
    import torch
    hold = torch.empty(args.parent_mib * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    a = torch.randn(1024, 1024, device="cuda")
    eng = subprocess.Popen([sys.executable, os.path.abspath(__file__), "engine", "--engine-mib", str(args.engine_mib)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = threading.Event()

    def wait_ready():
        if eng.stdout.readline().strip() == "ready":
            ready.set()

    threading.Thread(target=wait_ready, daemon=True).start()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200 if ready.is_set() else 503, {})
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(n) or b"{}")
            if self.path != "/v1/completions" or not ready.is_set():
                self.reply(503 if self.path == "/v1/completions" else 404, {"error": "not ready"})
                return
            with lock:
                (a @ a).sum().item()
            toks = int(req.get("max_tokens", 16))
            self.reply(200, {"id": "cmpl-gpu-standin", "object": "text_completion", "model": req.get("model", "gpu-standin"),
                             "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                             "usage": {"prompt_tokens": 8, "completion_tokens": toks, "total_tokens": 8 + toks}})

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"effective config: engine_mib={args.engine_mib} parent_mib={args.parent_mib}", flush=True)

    def on_term(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    srv.serve_forever()
    eng.stdin.close()
    eng.wait()
    del hold


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("role", choices=["server", "engine"])
    p.add_argument("--port", type=int, default=int(os.environ.get("WARDEN_PORT", "8000")))
    p.add_argument("--engine-mib", type=int, default=4096)
    p.add_argument("--parent-mib", type=int, default=512)
    args = p.parse_args()
    if args.role == "engine":
        engine(args.engine_mib)
    else:
        serve(args)


if __name__ == "__main__":
    main()
