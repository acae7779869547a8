"""Worker processes that run cases in isolation: a kernel that segfaults or loops forever takes
down its worker, not the campaign. The supervisor side (``Worker``) starts a process, sends it
requests, and turns a dead or silent process into a ``died``/``timeout`` outcome of the stage
(reference, fusion, no-fusion, xla) it had announced last."""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import asdict
from multiprocessing.connection import Connection

from .config import FuzzConfig


def case_request(seed: int, cfg: FuzzConfig, modes, xla: bool) -> dict:
    return {"kind": "case", "seed": seed, "cfg": cfg, "modes": tuple(modes), "xla": xla}


def check_request(text: str, input_seed: int, modes, xla: bool = False) -> dict:
    return {"kind": "check", "text": text, "input_seed": input_seed, "modes": tuple(modes), "xla": xla}


def _serve(conn: Connection) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .xla_spmd import ensure_device_flag
    ensure_device_flag()  # SPMD modules on XLA:CPU: a device per participant
    from .generator import GeneratorError, generate
    from .runner import run_case

    def stage(name: str) -> None:
        conn.send(("stage", name))
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if req is None:
            return
        t0 = time.perf_counter()
        if req["kind"] == "case":
            try:
                g = generate(req["seed"], req["cfg"])
            except GeneratorError as e:
                conn.send(("done", {"seed": req["seed"], "invalid": str(e), "text": e.text}))
                continue
            res = run_case(g.text, req["seed"], req["modes"], req["xla"], on_stage=stage)
            reply = summarize(res, req["seed"])
            reply["stats"] = {"ops": g.stats.ops, "features": sorted(g.stats.features), "ranks": sorted(g.stats.ranks),
                              "ets": sorted(g.stats.ets)}
        else:
            res = run_case(req["text"], req["input_seed"], req["modes"], req["xla"], on_stage=stage)
            reply = summarize(res, req["input_seed"])
        reply["seconds"] = time.perf_counter() - t0
        conn.send(("done", reply))


def summarize(res, seed: int) -> dict:
    out = {"seed": seed, "reference": asdict(res.reference), "outcomes": [asdict(o) for o in res.outcomes]}
    if res.failures:
        out["text"] = res.text
    return out


class Worker:
    """One worker process, reused until it dies or hangs."""

    def __init__(self, ctx=None):
        self.ctx = ctx or mp.get_context("spawn")
        self.proc = None
        self.conn: Connection | None = None
        self.request: dict | None = None
        self.stage: str | None = None
        self.deadline = 0.0
        self._start()

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    @property
    def busy(self) -> bool:
        return self.request is not None

    def submit(self, request: dict, timeout: float) -> None:
        self.request, self.stage = request, None
        self.deadline = time.monotonic() + timeout
        self.conn.send(request)

    def waitables(self) -> list:
        return [self.conn, self.proc.sentinel]

    def collect(self) -> dict | None:
        """The reply if the request finished (or failed); None while it is still running."""
        try:
            while self.conn.poll():
                kind, payload = self.conn.recv()
                if kind == "stage":
                    self.stage = payload
                else:
                    self.request = None
                    return payload
        except (EOFError, OSError):
            pass
        if not self.proc.is_alive():
            return self._lost("died", f"worker died (exit code {self.proc.exitcode}) during stage {self.stage}")
        if time.monotonic() > self.deadline:
            return self._lost("timeout", f"no answer within the time limit during stage {self.stage}")
        return None

    def _lost(self, status: str, detail: str) -> dict:
        req, stage = self.request, self.stage or "reference"
        if stage == "xla":  # XLA's own crash: counted apart from ours
            status = f"xla-{status}"
        self.kill()
        self._start()
        self.request = None
        seed = req.get("seed", req.get("input_seed"))
        outcome = {"mode": stage, "status": status, "detail": detail, "op": None,
                   "error_type": status, "seconds": 0.0}
        ref = outcome if stage == "reference" else {"mode": "reference", "status": "ok", "detail": "", "op": None,
                                                  "error_type": None, "seconds": 0.0}
        reply = {"seed": seed, "reference": ref, "outcomes": [] if stage == "reference" else [outcome],
                 "lost": status}
        if "text" in req:
            reply["text"] = req["text"]
        return reply

    def call(self, request: dict, timeout: float) -> dict:
        """Submit and wait (the shrinker's way of asking)."""
        from multiprocessing.connection import wait
        self.submit(request, timeout)
        while True:
            wait(self.waitables(), timeout=max(0.05, self.deadline - time.monotonic()))
            reply = self.collect()
            if reply is not None:
                return reply

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        if self.proc is not None:
            self.proc.join(2)
        self.kill()
