"""Tests of scripts/gpu_server.py's serve role on loopback, without a GPU:
`python3 -m unittest scripts/test_gpu_server.py` from the repository root.

The fake backend (no torch) drives the HTTP, SSE, scheduling, Layer-1 and
shutdown paths; the profiler tests need torch (the tiny CPU backend) and
are skipped without it. With bin/controller built, the Layer-1 and Layer-2
artifacts are also put through `controller validate`.
"""
import glob
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, "scripts", "gpu_server.py")
CONTROLLER = os.path.join(ROOT, "bin", "controller")

try:
    import torch
    HAVE_TORCH = True
    # The first active step's ProfilerStep number with warm-up 2: torch 1.x
    # named each step after the one before it (ProfilerStep#1..#8), torch 2
    # numbers them as vLLM's traces show (#2..#9).
    FIRST_ACTIVE = 2 if int(torch.__version__.split(".")[0]) >= 2 else 1
except ImportError:
    HAVE_TORCH = False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(cond, what, deadline_s=30):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def streaming(s, prompt, max_tokens):
    """Starts a completion on the server s in a thread and returns, once its
    first token came, the thread and the dict whose "r" is its result once
    the thread ends."""
    res = {}
    first = threading.Event()
    t = threading.Thread(target=lambda: res.update(r=s.complete(prompt, max_tokens, on_first=first.set)))
    t.start()
    until(first.is_set, "the first token")
    return t, res


class Server:
    def __init__(self, tmp, *extra):
        self.port = free_port()
        self.dir = tmp
        self.log = open(os.path.join(tmp, "server.log"), "wb")
        # a session of its own: the API process and its engine process are one group, as the controller starts them
        self.p = subprocess.Popen([sys.executable, SERVER, "serve", "--port", str(self.port)] + list(extra),
                                  stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        until(self.healthy, "health")

    def healthy(self):
        if self.p.poll() is not None:
            raise AssertionError("server exited %s: %s" % (self.p.returncode, self.logtext()))
        try:
            return self.get("/health")[0] == 200
        except OSError:
            return False

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def get(self, path):
        c = self.conn()
        c.request("GET", path)
        r = c.getresponse()
        try:
            return r.status, r.read()
        finally:
            c.close()

    def post(self, path, body=None):
        c = self.conn()
        c.request("POST", path, body=json.dumps(body or {}), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        try:
            return r.status, r.read()
        finally:
            c.close()

    def complete(self, prompt, max_tokens, on_first=None, **kw):
        """A streamed completion: (status, token chunks, usage, done, finish reasons)."""
        body = dict(model="m", prompt=prompt, max_tokens=max_tokens, ignore_eos=True, stream=True,
                    stream_options={"include_usage": True}, **kw)
        c = self.conn()
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            c.close()
            return r.status, 0, None, False, []
        toks, usage, done, finishes = 0, None, False, []
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                done = True
                break
            ev = json.loads(data)
            for ch in ev["choices"]:
                if ch["text"]:
                    toks += 1
                    if toks == 1 and on_first:
                        on_first()
                if ch.get("finish_reason"):
                    finishes.append(ch["finish_reason"])
            if ev.get("usage"):
                usage = ev["usage"]
        c.close()
        return r.status, toks, usage, done, finishes

    def term(self, deadline_s=30):
        self.p.send_signal(signal.SIGTERM)
        return self.p.wait(deadline_s)

    def kill_group(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()

    def close(self):
        self.kill_group()
        self.log.close()


def lines(path):
    return [json.loads(l) for l in open(path)]


def validate(*args):
    out = subprocess.run([CONTROLLER, "validate"] + list(args) + ["-o", "json"], capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


class ServeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpu-server-test-")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, *extra):
        s = Server(self.tmp, *extra)
        self.servers.append(s)
        return s

    def test_streams_exact_tokens_usage_and_done_for_concurrent_requests(self):
        s = self.start("--model-backend", "fake", "--max-num-batched-tokens", "64", "--max-num-seqs", "4")
        results = {}

        def one(i):
            results[i] = s.complete(list(range(1, 10 + 17 * i)), 3 + i)

        ts = [threading.Thread(target=one, args=(i,)) for i in range(10)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for i, (status, toks, usage, done, finishes) in results.items():
            self.assertEqual((status, toks, done, finishes), (200, 3 + i, True, ["length"]), i)
            self.assertEqual(usage, {"prompt_tokens": 9 + 17 * i, "completion_tokens": 3 + i,
                                     "total_tokens": 9 + 17 * i + 3 + i})
        # a text prompt counts its words
        self.assertEqual(s.complete("a b c d", 2)[2]["prompt_tokens"], 4)
        # refused: no prompt, a bad max_tokens, past the context length
        self.assertEqual(s.post("/v1/completions", {"prompt": []})[0], 400)
        self.assertEqual(s.post("/v1/completions", {"prompt": [1], "max_tokens": 0})[0], 400)
        self.assertEqual(s.post("/v1/completions", {"prompt": [1] * 16384, "max_tokens": 1})[0], 400)
        self.assertEqual(s.post("/start_profile")[0], 404)  # no --profiler-config
        status, body = s.get("/server_info?config_format=json")
        sc = json.loads(body)["vllm_config"]["scheduler_config"]
        self.assertEqual((status, sc["max_num_seqs"], sc["max_num_batched_tokens"]), (200, 4, 64))
        self.assertIn("Chunked prefill is enabled with max_num_batched_tokens=64.", s.logtext())

    def test_step_records_follow_the_schedule_and_close_with_a_footer(self):
        l1 = os.path.join(self.tmp, "opprof")
        # three requests of 40 steps or more (20 ms each) for two slots: the
        # third waits for one while the first two run
        s = self.start("--model-backend", "fake", "--max-num-batched-tokens", "32", "--max-num-seqs", "2",
                       "--fake-step-ms", "20", "--layer1-dir", l1, "--flush-interval-s", "0.1")
        ts = [threading.Thread(target=s.complete, args=(list(range(1, 41)), 40)) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(s.term(), 0)
        recs = lines(os.path.join(l1, "layer1.jsonl"))
        footer, data = recs[-1], recs[:-1]
        self.assertEqual([r["step"] for r in data], list(range(len(data))))
        self.assertTrue(all(r["prefill_tokens"] + r["decode_tokens"] <= 32 for r in data))
        self.assertTrue(all(r["num_running_reqs"] <= 2 for r in data))
        self.assertEqual(sum(r["prefill_tokens"] for r in data), 3 * 40)
        self.assertEqual(sum(r["decode_tokens"] for r in data), 3 * 39)  # the first token comes with the prefill
        self.assertTrue(any(r["chunked_prefill_requests"] for r in data))
        self.assertTrue(any(r["num_waiting_reqs"] for r in data))
        self.assertEqual(footer, {"footer": True, "step_count": len(data), "encoded_records": len(data),
                                  "written_records": len(data), "dropped_records": 0,
                                  "last_step_index": len(data) - 1})
        side = json.load(open(os.path.join(l1, "layer1.jsonl.footer.json")))
        self.assertEqual((side["final"], side["written_records"], side["flush_interval_s"]), (True, len(data), 0.1))
        if os.path.exists(CONTROLLER):
            v = validate("layer1", "--dir", l1, "--flush-interval-s", "0.1")
            self.assertEqual(v["verdict"], "pass", v)

    def test_hard_kill_leaves_a_fresh_sidecar_and_no_footer(self):
        l1 = os.path.join(self.tmp, "opprof")
        s = self.start("--model-backend", "fake", "--layer1-dir", l1, "--flush-interval-s", "0.1")
        s.complete([1, 2, 3], 20)
        side = os.path.join(l1, "layer1.jsonl.footer.json")
        first = until(lambda: os.path.exists(side) and json.load(open(side))["written_records"] == 20 and
                      json.load(open(side)), "the sidecar")
        until(lambda: json.load(open(side))["wall_time_unix_ns"] > first["wall_time_unix_ns"], "a later flush")
        s.kill_group()
        killed = time.time_ns()
        recs = lines(os.path.join(l1, "layer1.jsonl"))
        sc = json.load(open(side))
        self.assertFalse(any("footer" in r for r in recs))
        self.assertEqual((sc["final"], sc["written_records"], sc["last_step_index"]), (False, len(recs), recs[-1]["step"]))
        self.assertLess(killed - sc["wall_time_unix_ns"], 10**9)  # at most a flush interval and the kill's latency

    def test_sigterm_lets_in_flight_requests_finish_and_refuses_new_ones(self):
        s = self.start("--model-backend", "fake", "--fake-step-ms", "10", "--shutdown-timeout", "30")
        t, res = streaming(s, [1, 2], 100)
        s.p.send_signal(signal.SIGTERM)
        until(lambda: "SIGTERM: draining 1" in s.logtext(), "the drain")
        status = s.post("/v1/completions", {"prompt": [1], "max_tokens": 1})[0]
        t.join()
        self.assertEqual(status, 503)
        self.assertEqual(res["r"][:4], (200, 100, {"prompt_tokens": 2, "completion_tokens": 100, "total_tokens": 102}, True))
        self.assertEqual(s.p.wait(30), 0)
        self.assertIn("shutdown complete (engine exit 0)", s.logtext())

    def test_shutdown_timeout_aborts_what_is_left(self):
        s = self.start("--model-backend", "fake", "--fake-step-ms", "10", "--shutdown-timeout", "0.2")
        t, res = streaming(s, [1, 2], 10000)
        self.assertEqual(s.term(), 0)
        t.join()
        status, toks, usage, done, finishes = res["r"]
        self.assertLess(toks, 10000)
        self.assertEqual(finishes, ["abort"])
        self.assertIn("shutdown timeout: aborting 1 requests", s.logtext())


def trace_steps(path):
    t = json.load(gzip.open(path))
    t = t["traceEvents"] if isinstance(t, dict) else t  # a torch built without Kineto writes a bare list
    ev = [e for e in t if e.get("ph") == "X"]
    steps = sorted(int(e["name"].split("#")[1]) for e in ev
                   if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation")
    # a torch without Kineto writes no categories
    execs = [e["name"] for e in ev if e.get("cat", "user_annotation") == "user_annotation" and e["name"].startswith("execute_")]
    return steps, execs


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class ProfilerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpu-server-prof-")
        self.traces = os.path.join(self.tmp, "traces")
        self.stop_load = threading.Event()
        self.s = None

    def tearDown(self):
        self.stop_load.set()
        if self.s:
            self.s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, *extra):
        cfg = json.dumps({"profiler": "torch", "torch_profiler_dir": self.traces, "torch_profiler_with_stack": True,
                          "torch_profiler_record_shapes": True, "torch_profiler_use_gzip": True,
                          "wait_iterations": 0, "warmup_iterations": 2, "active_iterations": 8})
        self.s = Server(self.tmp, "--model-backend", "tiny", "--max-num-batched-tokens", "256",
                        "--profiler-config", cfg, *extra)

        def load():
            while not self.stop_load.is_set():
                self.s.complete(list(range(1, 50)), 20)

        for _ in range(4):
            threading.Thread(target=load, daemon=True).start()

    def files(self):
        return sorted(glob.glob(os.path.join(self.traces, "*.pt.trace.json.gz")))

    def test_two_windows_each_write_a_fresh_2_plus_8_trace(self):
        self.start()
        for w in (1, 2):
            self.assertEqual(self.s.post("/start_profile")[0], 200)
            until(lambda: len(self.files()) == w, "trace %d" % w)
            self.assertEqual(self.s.post("/stop_profile")[0], 200)
        for f in self.files():
            self.assertRegex(os.path.basename(f), r"^dp0_pp0_tp0_dcp0_ep0_rank0\.\d+\.pt\.trace\.json\.gz$")
            steps, execs = trace_steps(f)
            self.assertEqual(steps, list(range(FIRST_ACTIVE, FIRST_ACTIVE + 8)))
            self.assertEqual(len(execs), 8)
            self.assertTrue(all(re.match(r"^execute_context_\d+\(\d+\)_generation_\d+\(\d+\)$", e) for e in execs))

    def test_a_stall_during_the_window_admits_nothing_while_it_is_open(self):
        l1 = os.path.join(self.tmp, "opprof")
        self.start("--stall-during-profile", "--layer1-dir", l1, "--flush-interval-s", "0.1")
        until(lambda: os.path.exists(os.path.join(l1, "layer1.jsonl")), "the Layer-1 stream")
        self.assertEqual(self.s.post("/start_profile")[0], 200)
        until(lambda: len(self.files()) == 1, "the window's trace")
        self.assertEqual(self.s.post("/stop_profile")[0], 200)
        self.stop_load.set()
        self.assertEqual(self.s.term(), 0)
        recs = [r for r in lines(os.path.join(l1, "layer1.jsonl")) if not r.get("footer")]
        profiled = [r for r in recs if r["profiling"]]
        self.assertGreaterEqual(len(profiled), 10)
        # no request joins the running set while the window is open
        running = [r["num_running_reqs"] for r in profiled]
        self.assertEqual(running, sorted(running, reverse=True), running)
        self.assertTrue(any(r["num_waiting_reqs"] for r in profiled), "nothing waited: the stall was not tried")

    def test_an_early_stop_saves_a_truncated_window(self):
        self.start("--min-step-ms", "100")
        self.assertEqual(self.s.post("/start_profile")[0], 200)
        until(lambda: "profiler started" in self.s.logtext(), "the start")
        m = until(lambda: re.search(r"step (\d+)\)", self.s.logtext()), "the start step")
        started = int(m.group(1))
        # stop once five engine steps have run: in the active part, before the tenth
        until(lambda: self.step_count() >= started + 5, "five steps", 30)
        self.assertEqual(self.s.post("/stop_profile")[0], 200)
        files = until(self.files, "the truncated trace")
        steps, execs = trace_steps(files[0])
        self.assertEqual(steps[0], FIRST_ACTIVE)
        self.assertLess(steps[-1], FIRST_ACTIVE + 7)
        # the step open at the stop is recorded too, with no execute annotation in it
        self.assertEqual(len(execs), len(steps) - 1)
        if os.path.exists(CONTROLLER):
            v = validate("layer2", "--traces", self.traces, "--tp", "1", "--windows", "1")
            self.assertEqual(v["verdict"], "fail", v)

    def step_count(self):
        m = re.search(rb"^engine_steps_total (\d+)$", self.s.get("/metrics")[1], re.M)
        return int(m.group(1))


class StepGridTest(unittest.TestCase):
    """--min-step-ms with a clock the test moves: back-to-back steps end on
    a grid one period apart whatever the work after the model call took; an
    idle gap or an overrun starts the grid again."""

    def test_back_to_back_steps_keep_the_grid(self):
        sys.path.insert(0, os.path.dirname(SERVER))
        import gpu_server
        clock = {"now": 0}
        slept = []

        def sleep(s):
            slept.append(s)
            clock["now"] += int(round(s * 1e9))

        eng = types.SimpleNamespace(args=types.SimpleNamespace(min_step_ms=400.0), grid_end=None)
        ms = 1000000
        saved = (gpu_server.time.monotonic_ns, gpu_server.time.sleep)
        gpu_server.time.monotonic_ns, gpu_server.time.sleep = (lambda: clock["now"]), sleep
        try:
            ends = []
            for work_ms, after_ms in ((10, 3), (12, 5), (9, 1), (700, 2), (8, 0)):
                submit = clock["now"]
                clock["now"] += work_ms * ms  # the model call
                gpu_server.Engine.pad(eng, submit)
                ends.append(clock["now"] // ms)
                clock["now"] += after_ms * ms  # tokens out, the Layer-1 record
            clock["now"] += 5000 * ms  # idle: no request in flight
            submit = clock["now"]
            clock["now"] += 10 * ms
            gpu_server.Engine.pad(eng, submit)
            ends.append(clock["now"] // ms)
        finally:
            gpu_server.time.monotonic_ns, gpu_server.time.sleep = saved
        # 400, 800, 1200 on the grid though 3-5 ms went by after each; the
        # 700 ms step overran (ends when its call did: 1201 + 700), the next
        # one is on the new grid, and after the idle gap a grid starts at
        # that step's own start
        self.assertEqual(ends, [400, 800, 1200, 1901, 2301, 2301 + 5000 + 400])


class RepresentativenessTest(unittest.TestCase):
    """bench/smd-sim.py on this scheduler: gpu-phase3's saturation patterns
    make every step alike, so both windows pass the seed's |SMD| <= 0.25
    rule wherever they fall; the old uniform-length pattern rarely did."""

    def sim(self, *args):
        out = subprocess.run([sys.executable, "-B", os.path.join(ROOT, "bench", "smd-sim.py"), "--trials", "200"] + list(args),
                             capture_output=True, text=True, timeout=120, check=True).stdout
        m = re.search(r"pass in (\d+) of 200 trials", out)
        self.assertIsNotNone(m, out)
        return int(m.group(1))

    def test_the_shipped_patterns_pass_and_a_varying_one_does_not(self):
        self.assertEqual(self.sim("--input", "1009", "--output", "16", "--concurrency", "40"), 200)
        self.assertEqual(self.sim("--input", "497", "--output", "16", "--concurrency", "72"), 200)
        self.assertLess(self.sim("--input", "128:512", "--output", "64"), 40)


if __name__ == "__main__":
    unittest.main()
