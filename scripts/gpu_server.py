#!/usr/bin/env python3
"""A small real inference engine for checking Warden on a GPU, and the older GPU stand-in.

Role `serve` (docs/gpu.md): a Qwen3-MoE-shaped model with random weights,
built with transformers (nothing downloaded), served the way vLLM serves,
as two processes: an API process (HTTP on threads, no torch) and an engine
process (vLLM's EngineCore: the model, the step loop, the profiler and
Layer 1 on its main thread), joined by two process queues.

  - a step loop batching every request in flight: running requests first
    (one decode token each, or their next prefill chunk), then waiting
    ones, capped by --max-num-seqs and --max-num-batched-tokens (chunked
    prefill). A step is one forward pass over its scheduled tokens packed
    into one sequence: there is no KV cache, so decode tokens do not
    attend to their request's context; the text is meaningless, the token
    counts and the step costs follow the schedule;
  - POST /v1/completions (token-id or text prompts; streamed as one SSE
    chunk per generated token, the final usage chunk when
    stream_options.include_usage, then `data: [DONE]`; ignore_eos and
    max_tokens honoured exactly), GET /health, /v1/models, /metrics,
    /server_info (?config_format=json: vLLM's document shape);
  - POST /start_profile and /stop_profile with vLLM's step-scheduled
    semantics: a fresh torch profiler per window, schedule(wait, warmup,
    active, repeat=1) counted in engine steps, the trace written by the
    tensorboard handler as dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz
    when the schedule ends; an earlier stop saves what it has. Each step's
    forward runs inside record_function named as vLLM's execute
    annotations, execute_context_<n>(<tokens>)_generation_<m>(<tokens>);
  - a Layer-1 stream (one JSON line per engine step) in --layer1-dir or
    $VLLM_OPPROF_DIR, flushed every --flush-interval-s, each flush followed
    by an atomic replacement of <stream>.footer.json; at a clean close an
    in-stream footer and a final sidecar;
  - SIGTERM: new requests are refused (503), in-flight ones finish up to
    --shutdown-timeout, then the rest are aborted, the profiler stopped,
    the Layer-1 stream closed, exit 0.

--model-backend tiny (an embedding and a linear layer, CPU) and fake (no
torch; each step sleeps) let the non-model parts run without a GPU.

Roles `server` and `engine` are the older stand-in of protocols/gpu-smoke.yaml:
an API parent and an engine child that hold CUDA memory and run matrix
products.
"""
import argparse
import collections
import http.server
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time

WORKER_NAME = "dp0_pp0_tp0_dcp0_ep0_rank0"  # vLLM's trace file prefix, TP1


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


# ---------------------------------------------------------------- models


class FakeModel:
    """No torch: a step sleeps --fake-step-ms plus --fake-token-us per token."""

    device, uses_torch = "cpu", False

    def __init__(self, args):
        self.step_s, self.token_s = args.fake_step_ms / 1e3, args.fake_token_us / 1e6
        self.vocab = args.vocab_size
        self.rng = random.Random(0)

    def forward(self, tokens, sample_at):
        time.sleep(self.step_s + self.token_s * len(tokens))
        return [self.rng.randrange(self.vocab) for _ in sample_at]


class TorchModel:
    """A causal LM run on the step's packed tokens: transformers' Qwen3-MoE
    (backend torch) or an embedding and a linear layer (backend tiny)."""

    uses_torch = True

    def __init__(self, args):
        import torch
        self.torch = torch
        torch.manual_seed(args.seed)
        if args.model_backend == "tiny":
            self.device, dtype = "cpu", torch.float32
            emb = torch.nn.Embedding(args.vocab_size, 64)
            self.body = lambda ids: emb(ids)
            self.head = torch.nn.Linear(64, args.vocab_size)
        else:
            from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
            self.device, dtype = "cuda", torch.bfloat16
            cfg = Qwen3MoeConfig(vocab_size=args.vocab_size, hidden_size=args.hidden_size,
                                 intermediate_size=2 * args.hidden_size, moe_intermediate_size=args.hidden_size // 2,
                                 num_hidden_layers=args.num_layers, num_attention_heads=16, num_key_value_heads=4,
                                 head_dim=args.hidden_size // 16, num_experts=args.num_experts,
                                 num_experts_per_tok=args.experts_per_token,
                                 max_position_embeddings=max(args.max_num_batched_tokens, args.max_model_len))
            cfg._attn_implementation = "sdpa"
            m = Qwen3MoeForCausalLM(cfg).to(device="cuda", dtype=dtype).eval()
            self.params = sum(p.numel() for p in m.parameters())
            self.body = lambda ids: m.model(input_ids=ids, use_cache=False).last_hidden_state[0]
            self.head = m.lm_head
        if args.model_backend == "tiny":
            self.params = sum(p.numel() for p in emb.parameters()) + sum(p.numel() for p in self.head.parameters())
        self.dtype = dtype

    def forward(self, tokens, sample_at):
        torch = self.torch
        with torch.no_grad():
            ids = torch.tensor(tokens, dtype=torch.long).to(self.device, non_blocking=True).unsqueeze(0)
            h = self.body(ids)
            if h.dim() == 3:
                h = h[0]
            idx = torch.tensor(sample_at, dtype=torch.long).to(self.device, non_blocking=True)
            return self.head(h.index_select(0, idx)).argmax(-1).tolist()  # .tolist() synchronizes


def build_model(args):
    if args.model_backend == "fake":
        return FakeModel(args)
    return TorchModel(args)


# -------------------------------------------------------------- profiler


class StepProfiler:
    """One profile window, vLLM's TorchProfilerWrapper with a schedule: a
    fresh torch profiler, started at a step boundary, stepped once per
    engine step; the tensorboard handler saves the trace when the schedule
    ends (after wait + warmup + active steps); stop() before then saves
    what the active steps recorded (nothing during wait or warm-up)."""

    def __init__(self, cfg, cuda):
        import torch.profiler as tp
        acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if cuda else [])
        sched = tp.schedule(skip_first=0, wait=cfg["wait_iterations"], warmup=cfg["warmup_iterations"],
                            active=cfg["active_iterations"], repeat=1)
        self.total = cfg["wait_iterations"] + cfg["warmup_iterations"] + cfg["active_iterations"]
        self.steps = 0
        self.prof = tp.profile(activities=acts, schedule=sched,
                               record_shapes=cfg["torch_profiler_record_shapes"],
                               with_stack=cfg["torch_profiler_with_stack"],
                               on_trace_ready=tp.tensorboard_trace_handler(
                                   cfg["torch_profiler_dir"], worker_name=WORKER_NAME,
                                   use_gzip=cfg["torch_profiler_use_gzip"]))
        self.prof.start()

    def step(self):
        self.steps += 1
        self.prof.step()

    def stop(self):
        self.prof.stop()


PROFILER_DEFAULTS = {"profiler": "torch", "torch_profiler_dir": "", "torch_profiler_with_stack": True,
                     "torch_profiler_record_shapes": True, "torch_profiler_use_gzip": True,
                     "wait_iterations": 0, "warmup_iterations": 2, "active_iterations": 8}


def profiler_config(text):
    """vLLM's --profiler-config JSON: the fields this engine reads, with
    vLLM's defaults for the schedule left out."""
    if not text:
        return None
    cfg = dict(PROFILER_DEFAULTS)
    cfg.update(json.loads(text))
    if cfg["profiler"] != "torch" or not cfg["torch_profiler_dir"]:
        raise SystemExit("--profiler-config: profiler must be torch and torch_profiler_dir set")
    return cfg


# --------------------------------------------------------------- layer 1


def atomic_write(path, data):
    """Write data to path through a same-directory temporary file, fsync,
    rename, fsync the directory."""
    d = os.path.dirname(path) or "."
    tmp = os.path.join(d, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Layer1:
    """The Layer-1 JSONL stream of A-P3-5: records are encoded by the
    engine, appended by a flusher every flush interval, and after each
    flush the sidecar <stream>.footer.json is replaced atomically with the
    counters through that flush. close() flushes, appends the in-stream
    footer and writes the final sidecar."""

    MAX_PENDING = 1 << 20  # encoded records waiting for a flush; beyond: dropped

    def __init__(self, d, flush_s):
        os.makedirs(d, exist_ok=True)
        self.path = os.path.join(d, "layer1.jsonl")
        self.f = open(self.path, "wb")
        self.flush_s = flush_s
        self.lock = threading.Lock()
        self.pending = []
        self.encoded = self.written = self.dropped = 0
        self.last_step = -1
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="layer1", daemon=True)
        self.thread.start()

    def record(self, rec):
        line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
        with self.lock:
            self.encoded += 1
            if len(self.pending) >= self.MAX_PENDING:
                self.dropped += 1
                return
            self.pending.append((rec["step"], line))

    def loop(self):
        while not self.stop_ev.wait(self.flush_s):
            self.flush(False)

    def flush(self, final):
        with self.lock:
            batch, self.pending = self.pending, []
        if batch:
            self.f.write(b"".join(line for _, line in batch))
            self.f.flush()
            os.fsync(self.f.fileno())
        with self.lock:
            self.written += len(batch)
            if batch:
                self.last_step = batch[-1][0]
            counters = {"encoded_records": self.encoded, "written_records": self.written,
                        "dropped_records": self.dropped, "last_step_index": self.last_step}
        if final:
            footer = dict(footer=True, step_count=counters["written_records"], **counters)
            self.f.write((json.dumps(footer, separators=(",", ":")) + "\n").encode())
            self.f.flush()
            os.fsync(self.f.fileno())
        side = dict(counters, wall_time_unix_ns=time.time_ns(), flush_interval_s=self.flush_s, final=final)
        atomic_write(self.path + ".footer.json", json.dumps(side).encode())

    def close(self):
        self.stop_ev.set()
        self.thread.join()
        self.flush(True)
        self.f.close()


# ---------------------------------------------------------------- engine


class Request:
    """A request as the engine holds it."""

    def __init__(self, rid, prompt, max_tokens, ignore_eos):
        self.id, self.prompt, self.max_tokens, self.ignore_eos = rid, prompt, max_tokens, ignore_eos
        self.computed = 0  # prompt tokens processed
        self.output = []
        self.cancelled = False

    def context(self):
        return self.computed + len(self.output)


class Engine:
    """The step loop of the engine process (vLLM's EngineCore): its main
    thread owns the scheduler, the model, the profiler and the Layer-1
    records. The API process talks to it through two process queues: in,
    ("req", id, prompt, max_tokens, ignore_eos), ("cancel", id), ("call",
    id, name) run at a step boundary, ("drain",); out, ("ready", info),
    ("tokens", [(id, token, finish)], metrics) once per step, ("abort",
    [id]), ("reply", id, result, error), ("exit", code)."""

    def __init__(self, args, model, layer1, prof_cfg, inq, outq):
        self.args, self.model, self.layer1, self.prof_cfg = args, model, layer1, prof_cfg
        self.inq, self.outq = inq, outq
        self.live = {}
        self.waiting = collections.deque()
        self.running = []
        self.events = []
        self.step_index = 0
        self.grid_end = None  # --min-step-ms: where the last padded step ended
        self.profiler = None
        self.profiled_calls_ms = []
        self.stopping = False
        self.drain_deadline = None
        self.parent = os.getppid()
        self.record_function = None
        if model.uses_torch:
            import torch.profiler
            self.record_function = torch.profiler.record_function

    def take(self, block):
        while True:
            try:
                item = self.inq.get(block=block, timeout=0.05 if block else None)
            except queue.Empty:
                return
            block = False
            kind = item[0]
            if kind == "req":
                r = Request(*item[1:])
                self.live[r.id] = r
                self.waiting.append(r)
            elif kind == "cancel":
                r = self.live.pop(item[1], None)
                if r is not None:
                    r.cancelled = True
            elif kind == "call":
                res, err = None, None
                try:
                    res = getattr(self, item[2])()
                except Exception as e:  # the caller reports it
                    err = "%s: %s" % (type(e).__name__, e)
                self.outq.put(("reply", item[1], res, err))
            elif kind == "drain":
                self.drain()

    def drain(self):
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic() + self.args.shutdown_timeout
            log("SIGTERM: draining %d in-flight requests, shutdown timeout %gs"
                % (len(self.waiting) + len(self.running), self.args.shutdown_timeout))

    def loop(self, signalled):
        """Runs on the engine process's main thread, where the model was
        built: Kineto starts its CUPTI client only on the thread that
        registered it. A drain (from the API process, or a SIGTERM to this
        process: signalled) lets what is in flight finish up to
        --shutdown-timeout, then aborts the rest."""
        while not self.stopping:
            self.take(block=not (self.waiting or self.running))
            if signalled.is_set() or os.getppid() != self.parent:
                self.drain()
            if self.drain_deadline is not None:
                left = len(self.waiting) + len(self.running)
                if left and time.monotonic() >= self.drain_deadline:
                    log("shutdown timeout: aborting %d requests" % left)
                if not left or time.monotonic() >= self.drain_deadline:
                    self.shutdown()
                    break
            self.step()

    def schedule(self):
        """vLLM v1's order: running requests first, then waiting ones;
        the token budget caps each step, the running set --max-num-seqs."""
        budget, sched, deferred = self.args.max_num_batched_tokens, [], 0
        self.running = [r for r in self.running if not r.cancelled]
        for r in self.running:
            n = 1 if r.computed == len(r.prompt) else min(len(r.prompt) - r.computed, budget)
            if n <= 0 or budget <= 0:
                deferred += 1
                continue
            sched.append((r, n))
            budget -= n
        # --stall-during-profile: no request is admitted while a profile
        # window is open (a stall during the window only, to make a window
        # unrepresentative on purpose)
        admit = not (getattr(self.args, "stall_during_profile", False) and getattr(self, "profiler", None) is not None)
        while admit and self.waiting and len(self.running) < self.args.max_num_seqs and budget > 0:
            r = self.waiting.popleft()
            if r.cancelled:
                continue
            n = min(len(r.prompt), budget)
            self.running.append(r)
            sched.append((r, n))
            budget -= n
        return sched, deferred

    def step(self):
        submit = time.monotonic_ns()
        sched, deferred = self.schedule()
        if not sched:
            return
        tokens, sample_at, who = [], [], []
        npre = tpre = ndec = tdec = chunked = 0
        for r, n in sched:
            if r.computed < len(r.prompt):
                tokens.extend(r.prompt[r.computed:r.computed + n])
                npre, tpre = npre + 1, tpre + n
                if r.computed + n < len(r.prompt):
                    chunked += 1
                    continue  # a partial chunk samples nothing
            else:
                tokens.append(r.output[-1] if r.output else r.prompt[-1])
                ndec, tdec = ndec + 1, tdec + 1
            sample_at.append(len(tokens) - 1)
            who.append(r)
        name = "execute_context_%d(%d)_generation_%d(%d)" % (npre, tpre, ndec, tdec)
        if self.record_function is not None:
            with self.record_function(name):
                out = self.model.forward(tokens, sample_at)
        else:
            out = self.model.forward(tokens, sample_at)
        if self.profiler is not None:  # the model call under the profiler, before any padding
            self.profiled_calls_ms.append((time.monotonic_ns() - submit) / 1e6)
        if self.args.min_step_ms > 0:
            self.pad(submit)
        for r, n in sched:
            r.computed = min(len(r.prompt), r.computed + n)
        for r, tok in zip(who, out):
            self.emit(r, tok)
        self.running = [r for r in self.running if not r.cancelled and len(r.output) < r.max_tokens]
        self.outq.put(("tokens", self.events, {"steps": self.step_index + 1, "running": len(self.running),
                                               "waiting": len(self.waiting)}))
        self.events = []
        complete = time.monotonic_ns()
        profiling = self.profiler is not None
        if profiling:
            self.profiler.step()
        if self.layer1 is not None:
            chunks = [n for r, n in sched if n > 1]  # the prefill chunks (a decode schedules one token)
            self.layer1.record(self.layer1_record(submit, complete, sched, deferred, npre, tpre, ndec, tdec,
                                                  chunked, profiling, chunks))
        self.step_index += 1

    def pad(self, submit):
        """--min-step-ms: a GPU-bound engine, whose step takes as long as
        its device work. Back-to-back steps end on a fixed grid, one every
        --min-step-ms, so the work after the model call (emitting tokens,
        the Layer-1 record) does not lengthen the period; a step after an
        idle wait, or one whose model call overran the grid, starts it
        again."""
        period = int(self.args.min_step_ms * 1e6)
        end = submit + period
        if self.grid_end is not None and submit - self.grid_end < period // 2:
            end = self.grid_end + period
        now = time.monotonic_ns()
        if now >= end:
            end = now
        else:
            time.sleep((end - now) / 1e9)
        self.grid_end = end

    def emit(self, r, tok):
        if r.cancelled:
            return
        r.output.append(tok)
        finish = None
        if len(r.output) >= r.max_tokens:
            finish = "length"
        elif not r.ignore_eos and tok == self.args.eos_token_id:
            finish = "stop"
            r.max_tokens = len(r.output)
        if finish:
            self.live.pop(r.id, None)
        self.events.append((r.id, tok, finish))

    # Layer-1 schema v1 (pkg/contract/layer1schema.go, docs/validators.md):
    # every field of the seed's "Layer 1: always on" list, one record a step.
    CONTEXT_EDGES = (512, 2048, 8192)     # context-length histogram buckets: <=512, <=2048, <=8192, more
    CHUNK_EDGES = (256, 1024, 4096)       # chunk-size histogram buckets, likewise

    @staticmethod
    def hist(values, edges):
        out = [0] * (len(edges) + 1)
        for v in values:
            i = 0
            while i < len(edges) and v > edges[i]:
                i += 1
            out[i] += 1
        return out

    def layer1_record(self, submit, complete, sched, deferred, npre, tpre, ndec, tdec, chunked, profiling, chunks=()):
        held = sum(r.context() for r in self.running)
        cap = self.args.max_num_seqs * self.args.max_model_len
        ctx = [r.context() for r, _ in sched]
        n = tpre + tdec
        cls = "none" if tpre == 0 else ("chunked" if chunked else "whole")
        return {"schema": 1, "step": self.step_index, "submit_mono_ns": submit, "complete_mono_ns": complete,
                "model_executed": n > 0, "num_scheduled_reqs": len(sched),
                "num_prefill_reqs": npre, "prefill_tokens": tpre, "num_decode_reqs": ndec, "decode_tokens": tdec,
                "chunked_prefill_class": cls, "chunk_size_hist": self.hist(chunks, self.CHUNK_EDGES),
                "context_len_hist": self.hist(ctx, self.CONTEXT_EDGES),
                "num_waiting_reqs": len(self.waiting), "num_running_reqs": len(self.running),
                "num_deferred_reqs": deferred, "num_preemptions": 0, "kv_cache_usage": min(1.0, held / cap),
                "prefix_cache_queries": tpre, "prefix_cache_hits": 0,
                "cuda_graph_hit": False, "runtime_mode": "NONE", "unpadded_tokens": n, "bucket_tokens": n,
                "padding_tokens": 0,
                # beside the schema (allowed, not read by schema-v1 readers)
                "chunked_prefill_requests": chunked, "profiling": profiling}

    # calls from the API process, run at a step boundary

    def start_profile(self):
        if self.profiler is None:  # vLLM ignores a start while a window is open
            os.makedirs(self.prof_cfg["torch_profiler_dir"], exist_ok=True)
            self.profiler = StepProfiler(self.prof_cfg, self.model.device == "cuda")
            self.profiled_calls_ms = []
            log("profiler started (step %d)" % self.step_index)

    def stop_profile(self):
        if self.profiler is not None:
            p, self.profiler = self.profiler, None  # a fresh profiler next time
            p.stop()
            calls = sorted(self.profiled_calls_ms)
            log("profiler stopped after %d steps (step %d); model calls while it was open: p50 %.1f ms, max %.1f ms"
                % (p.steps, self.step_index, calls[len(calls) // 2] if calls else 0, calls[-1] if calls else 0))
            return p.steps
        return 0

    def shutdown(self):
        """Abort what is left, stop the profiler, end the loop."""
        self.outq.put(("abort", list(self.live)))
        self.live.clear()
        self.waiting.clear()
        self.running = []
        self.stop_profile()
        self.stopping = True


# ------------------------------------------------------------------ HTTP


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            return  # a client that went away is no server error
        super().handle_error(request, client_address)


class JSONHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers JSON."""

    def log_message(self, *a):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_handler(st):
    """st: the serve state (args, engine, draining flag, counters)."""
    args, eng = st["args"], st["engine"]  # eng: the EngineClient

    class Handler(JSONHandler):
        protocol_version = "HTTP/1.1"
        timeout = args.idle_timeout_s  # uvicorn closes idle keep-alive connections after 5 s

        def do_GET(self):
            path, _, query = self.path.partition("?")
            if path == "/health":
                self.reply(503 if st["draining"] else 200, {})
            elif path == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": args.served_model_name, "object": "model",
                                                             "owned_by": "warden", "max_model_len": args.max_model_len}]})
            elif path == "/metrics":
                data = metrics(st).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            elif path == "/server_info":
                self.reply(200, server_info(st, "config_format=json" in query))
            else:
                self.reply(404, {"error": {"message": "not found", "code": 404}})

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(n) if n else b""
            if self.path in ("/start_profile", "/stop_profile"):
                return self.profile(self.path)
            if self.path != "/v1/completions":
                return self.reply(404, {"error": {"message": "not found", "code": 404}})
            if st["draining"]:
                return self.reply(503, {"error": {"message": "server is shutting down", "code": 503}})
            try:
                req, stream, usage = parse_completion(json.loads(raw or b"{}"), args, st)
            except (ValueError, TypeError) as e:
                return self.reply(400, {"error": {"message": str(e), "type": "BadRequestError", "code": 400}})
            eng.submit(req)
            if stream:
                self.stream(req, usage)
            else:
                self.whole(req)

        def profile(self, path):
            if st["prof_cfg"] is None:
                return self.reply(404, {"error": {"message": "profiling is not enabled", "code": 404}})
            try:
                eng.call(path[1:])  # start_profile, stop_profile: at the engine's next step boundary
            except Exception as e:
                return self.reply(500, {"error": {"message": "profiler: %s" % e, "code": 500}})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def stream(self, req, usage):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            created, head = int(time.time()), {"id": "cmpl-" + req.id, "object": "text_completion"}
            try:
                while True:
                    kind, tok, finish = req.out.get()
                    if kind == "abort":  # vLLM ends an aborted request with finish_reason abort
                        ev = dict(head, created=created, model=args.served_model_name,
                                  choices=[{"index": 0, "text": "", "logprobs": None, "finish_reason": "abort"}])
                        self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
                        break
                    ev = dict(head, created=created, model=args.served_model_name,
                              choices=[{"index": 0, "text": " t%d" % tok, "logprobs": None,
                                        "finish_reason": finish, "stop_reason": None}])
                    self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
                    if finish:
                        break
                if usage:
                    ev = dict(head, created=created, model=args.served_model_name, choices=[],
                              usage=usage_of(req))
                    self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
                self.chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                eng.cancel(req.id)  # the client went away: the engine drops it
                self.close_connection = True

        def whole(self, req):
            finish = None
            while finish is None:
                _, _, finish = req.out.get()
            self.reply(200, {"id": "cmpl-" + req.id, "object": "text_completion", "created": int(time.time()),
                             "model": args.served_model_name,
                             "choices": [{"index": 0, "text": "".join(" t%d" % t for t in req.output),
                                          "logprobs": None, "finish_reason": finish}],
                             "usage": usage_of(req)})

    return Handler


def usage_of(req):
    c = len(req.output)
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": c, "total_tokens": req.prompt_tokens + c}


def parse_completion(body, args, st):
    """A completions request: the prompt as token ids (a list of ints) or
    text (one token per whitespace-separated word: there is no
    tokenizer)."""
    p = body.get("prompt")
    if isinstance(p, list) and p and isinstance(p[0], list) and len(p) == 1:
        p = p[0]
    if isinstance(p, str):
        ids = [hash(w) % args.vocab_size for w in p.split()] or [0]
    elif isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        ids = p
    else:
        raise ValueError("prompt must be a non-empty list of token ids or a string")
    if any(t < 0 or t >= args.vocab_size for t in ids):
        ids = [t % args.vocab_size for t in ids]  # a random model: any id maps onto its vocabulary
    mt = body.get("max_tokens", 16)
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        raise ValueError("max_tokens must be a positive integer")
    if len(ids) + mt > args.max_model_len:
        raise ValueError("This model's maximum context length is %d tokens. However, you requested %d tokens "
                         "(%d in the messages, %d in the completion)." % (args.max_model_len, len(ids) + mt,
                                                                          len(ids), mt))
    with st["lock"]:
        st["seq"] += 1
        rid = "%x-%d" % (os.getpid(), st["seq"])
    stream = bool(body.get("stream", False))
    usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
    return ApiRequest(rid, ids, mt, bool(body.get("ignore_eos", False))), stream, usage


def metrics(st):
    """A few of vLLM's Prometheus gauges, and the engine's step count."""
    m = st["engine"].metrics
    return ("vllm:num_requests_running %d\nvllm:num_requests_waiting %d\nengine_steps_total %d\n"
            % (m["running"], m["waiting"], m["steps"]))


def server_info(st, as_json):
    a = st["args"]
    cfg = {
        "model_config": {"model": a.served_model_name, "dtype": st["info"]["dtype"], "max_model_len": a.max_model_len,
                         "backend": a.model_backend, "hidden_size": a.hidden_size, "num_hidden_layers": a.num_layers,
                         "num_experts": a.num_experts, "num_experts_per_tok": a.experts_per_token,
                         "parameters": st["info"]["params"]},
        "scheduler_config": {"max_num_seqs": a.max_num_seqs, "max_num_batched_tokens": a.max_num_batched_tokens,
                             "enable_chunked_prefill": True, "max_model_len": a.max_model_len},
        "parallel_config": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1},
        "profiler_config": st["prof_cfg"],
        "shutdown_timeout": a.shutdown_timeout,
    }
    return {"vllm_config": cfg if as_json else str(cfg), "vllm_env": {}, "system_env": {}}


# ----------------------------------------------------------------- serve


def warm_up(model, args):
    t = time.monotonic()
    for n in (args.max_num_batched_tokens, 64, 1):
        model.forward([1] * n, [n - 1])
    return time.monotonic() - t


def engine_main(args, inq, outq):
    """The engine process (vLLM's EngineCore): the model, the step loop,
    the profiler and Layer 1, each on this process's main thread. The API
    process's threads never touch torch: torch 2.11's profiler with stacks
    crashed at the second window's start when HTTP threads came and went
    in the process it profiled."""
    signalled = threading.Event()
    signal.signal(signal.SIGTERM, lambda n, f: signalled.set())  # a signal to the group: drain too
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    prof_cfg = profiler_config(args.profiler_config)
    t0 = time.monotonic()
    model = build_model(args)
    load_s = time.monotonic() - t0
    warm_s = warm_up(model, args)
    if prof_cfg and not model.uses_torch:
        raise SystemExit("--profiler-config needs a torch backend")
    l1dir = args.layer1_dir or os.environ.get("VLLM_OPPROF_DIR", "")
    layer1 = Layer1(l1dir, args.flush_interval_s) if l1dir else None
    eng = Engine(args, model, layer1, prof_cfg, inq, outq)
    info = {"device": model.device, "dtype": str(getattr(model, "dtype", "none")),
            "params": getattr(model, "params", 0), "load_s": load_s, "warmup_s": warm_s, "layer1_dir": l1dir}
    outq.put(("ready", info))
    eng.loop(signalled)
    if layer1 is not None:
        layer1.close()
        log("layer1 closed: %d records, footer written" % layer1.written)
    while True:  # whatever arrived after the shutdown is aborted, calls answered
        try:
            item = inq.get_nowait()
        except queue.Empty:
            break
        if item[0] == "req":
            outq.put(("abort", [item[1]]))
        elif item[0] == "call":
            outq.put(("reply", item[1], None, "the engine has stopped"))
    outq.put(("exit", 0))
    outq.close()
    outq.join_thread()


class ApiRequest:
    """A request as the API process holds it: its stream's queue of
    ("tok", token, finish) and ("abort", None, "abort")."""

    def __init__(self, rid, prompt, max_tokens, ignore_eos):
        self.id, self.prompt, self.max_tokens, self.ignore_eos = rid, prompt, max_tokens, ignore_eos
        self.prompt_tokens = len(prompt)
        self.output = []
        self.out = queue.Queue()


class EngineClient:
    """The API process's side of the engine process: it starts it, and one
    reader thread hands its per-step tokens to the requests' streams and
    its replies to the callers."""

    def __init__(self, args):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: torch is imported there only
        self.inq, self.outq = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=engine_main, args=(args, self.inq, self.outq), name="EngineCore")
        self.reqs, self.calls = {}, {}
        self.lock = threading.Lock()
        self.seq = 0
        self.metrics = {"steps": 0, "running": 0, "waiting": 0}
        self.ready = threading.Event()
        self.info = None
        self.exited = threading.Event()
        self.proc.start()
        threading.Thread(target=self.read, name="engine-reader", daemon=True).start()

    def read(self):
        while True:
            try:
                msg = self.outq.get(timeout=0.5)
            except queue.Empty:
                if not self.proc.is_alive():
                    break
                continue
            kind = msg[0]
            if kind == "tokens":
                for rid, tok, finish in msg[1]:
                    r = self.reqs.get(rid)
                    if r is None:
                        continue
                    r.output.append(tok)
                    r.out.put(("tok", tok, finish))
                    if finish:
                        self.reqs.pop(rid, None)
                self.metrics = msg[2]
            elif kind == "abort":
                for rid in msg[1]:
                    r = self.reqs.pop(rid, None)
                    if r is not None:
                        r.out.put(("abort", None, "abort"))
            elif kind == "reply":
                c = self.calls.get(msg[1])
                if c is not None:
                    c["res"], c["err"] = msg[2], msg[3]
                    c["ev"].set()
            elif kind == "ready":
                self.info = msg[1]
                self.ready.set()
            elif kind == "exit":
                break
        for r in list(self.reqs.values()):  # the engine is gone: end every stream
            r.out.put(("abort", None, "abort"))
        for c in list(self.calls.values()):
            c.setdefault("err", "the engine has stopped")
            c["ev"].set()
        self.exited.set()

    def submit(self, r):
        self.reqs[r.id] = r
        self.inq.put(("req", r.id, r.prompt, r.max_tokens, r.ignore_eos))

    def cancel(self, rid):
        self.reqs.pop(rid, None)
        self.inq.put(("cancel", rid))

    def call(self, name, timeout=300):
        with self.lock:
            self.seq += 1
            cid = self.seq
        c = self.calls[cid] = {"ev": threading.Event()}
        self.inq.put(("call", cid, name))
        ok = c["ev"].wait(timeout)
        self.calls.pop(cid, None)
        if not ok:
            raise TimeoutError("the engine did not answer")
        if c.get("err"):
            raise RuntimeError(c["err"])
        return c.get("res")


def serve(args):
    """The API process (vLLM's API server): HTTP on threads, the engine in
    a child process; SIGTERM drains: new requests are refused, the engine
    finishes what it holds up to --shutdown-timeout, then both exit."""
    prof_cfg = profiler_config(args.profiler_config)
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    eng = EngineClient(args)
    while not eng.ready.wait(0.2):
        if stop.is_set() or not eng.proc.is_alive():
            eng.proc.join(10)
            log("engine exited before it was ready (exit %s)" % eng.proc.exitcode)
            sys.exit(1)
    info = eng.info
    log("model loaded: backend=%s device=%s dtype=%s parameters=%d load_s=%.1f warmup_s=%.1f engine_pid=%d"
        % (args.model_backend, info["device"], info["dtype"], info["params"], info["load_s"], info["warmup_s"],
           eng.proc.pid))
    st = {"args": args, "engine": eng, "draining": False, "lock": threading.Lock(), "seq": 0, "prof_cfg": prof_cfg,
          "info": info}
    # The effective configuration, as vLLM logs it (vllm/config/scheduler.py) and once on one line.
    log("Chunked prefill is enabled with max_num_batched_tokens=%d." % args.max_num_batched_tokens)
    log("effective config: max_num_seqs=%d max_num_batched_tokens=%d max_model_len=%d shutdown_timeout=%g "
        "backend=%s hidden_size=%d num_layers=%d num_experts=%d experts_per_token=%d layer1_dir=%s "
        "flush_interval_s=%g profiler=%s"
        % (args.max_num_seqs, args.max_num_batched_tokens, args.max_model_len, args.shutdown_timeout,
           args.model_backend, args.hidden_size, args.num_layers, args.num_experts, args.experts_per_token,
           info["layer1_dir"] or "-", args.flush_interval_s, json.dumps(prof_cfg, sort_keys=True) if prof_cfg else "-"))
    srv = Server((args.host, args.port), make_handler(st))
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, name="http", daemon=True).start()
    log("Uvicorn running on http://%s:%d (pid %d)" % (args.host, args.port, os.getpid()))
    while not stop.wait(0.2):
        if eng.exited.is_set():
            break
    st["draining"] = True
    eng.inq.put(("drain",))
    eng.proc.join(args.shutdown_timeout + 120)
    if eng.proc.is_alive():
        log("the engine did not exit: terminating it")
        eng.proc.terminate()
        eng.proc.join(10)
    eng.exited.wait(5)
    srv.shutdown()
    srv.server_close()
    code = eng.proc.exitcode
    log("shutdown complete (engine exit %s)" % code)
    sys.exit(0 if code == 0 else 1)


# ------------------------------------------------------- older stand-in


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


def standin(args):
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

    class Handler(JSONHandler):
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["serve", "server", "engine"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=int(os.environ.get("WARDEN_PORT", "8000")))
    p.add_argument("--served-model-name", default="qwen3-moe-random")
    p.add_argument("--model-backend", choices=["torch", "tiny", "fake"], default="torch",
                   help="torch: transformers Qwen3-MoE on CUDA; tiny: a small torch model on CPU; fake: no torch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--hidden-size", type=int, default=1024)
    p.add_argument("--num-layers", type=int, default=6)
    p.add_argument("--num-experts", type=int, default=16)
    p.add_argument("--experts-per-token", type=int, default=4)
    p.add_argument("--eos-token-id", type=int, default=2)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=16384)
    p.add_argument("--profiler-config", default="", help="vLLM's --profiler-config JSON (torch profiler)")
    p.add_argument("--layer1-dir", default="", help="Layer-1 stream directory (default $VLLM_OPPROF_DIR)")
    p.add_argument("--flush-interval-s", type=float, default=1.0)
    p.add_argument("--shutdown-timeout", type=float, default=0.0, help="seconds in-flight requests get after SIGTERM")
    p.add_argument("--idle-timeout-s", type=float, default=5.0, help="close a keep-alive connection idle this long")
    p.add_argument("--stall-during-profile", action="store_true",
                   help="admit no request while a profile window is open: a window made unrepresentative on purpose")
    p.add_argument("--min-step-ms", type=float, default=0.0, help="pad every engine step to this long, back-to-back steps on a fixed grid (a GPU-bound engine)")
    p.add_argument("--fake-step-ms", type=float, default=5.0)
    p.add_argument("--fake-token-us", type=float, default=2.0)
    p.add_argument("--engine-mib", type=int, default=4096)
    p.add_argument("--parent-mib", type=int, default=512)
    args = p.parse_args()
    if args.role == "engine":
        engine(args.engine_mib)
    elif args.role == "server":
        standin(args)
    else:
        serve(args)


if __name__ == "__main__":
    main()
