"""Find the state: what a reused server answers at a Bug B cell after a reset, and after a
restore (sleep level 1 + wake + reset), against its own first request (issue 24, stage a of
benchmarks/gpu_restore.sh).

One server, started as ``sweep --isolation restore`` would start it (the same adapter:
``--enable-sleep-mode``, and for vLLM ``VLLM_SERVER_DEV_MODE=1``), takes any sweep flags
for its configuration and sends, at the rule's residue (``--residue``) and other residues
of the same document (``--others``):

  first        the rule's prompt, the server's first request (cold)
  self-hit     the same again
  reset        /reset_prefix_cache, the rule's prompt
  others+reset the other prompts, reset, the rule's prompt    (history-dependent?)
  restore      sleep level 1, wake, reset (harness/serve/restore.py, each step proven), the rule's
  others+restore  the other prompts, restore, the rule's prompt   (x2)
  others+sleep-wake  the other prompts, sleep level 1 + wake without an explicit reset
  others+reset again  (does reset land on yet another answer?)

A restore that fails ends the probe (rc 1, one line on stderr; its step is a "not sent" row):
on vLLM 0.26.0 a failed sleep leaves the server paused with its memory discarded.

Each step is one JSON line in OUT/probe.jsonl (answer sha1 and head, verdict against the
passage, cached_tokens, latency, the restore proof); OUT/probe.md is the table, with
``same as first`` for each answer. Runs on the lab too (``--engine lab``), which is how it
is tested on a CPU.

    python benchmarks/restore_probe.py --out DIR [--residue R] [--others A,B] [--gpu N]
        [--server-log-dir DIR] -- SWEEP FLAGS (e.g. --engine vllm --model M --spec ngram ...)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.serve.client import EngineClient  # noqa: E402
from harness.serve.engines import make_adapter  # noqa: E402
from harness.options import options_from_argv  # noqa: E402
from engine.prompts.planner import calibrate, plan_residue  # noqa: E402
from engine.prompts.templating import ChatTokenizer  # noqa: E402
from harness.serve.restore import RestoreFailed, restore_server  # noqa: E402
from harness.server_pool import PortAllocator, ServerProcess, Slot  # noqa: E402
from harness.judge.verdict import judge, sha1  # noqa: E402

__all__ = ["main"]


class ProbeStopped(Exception):
    """A restore failed: the server cannot be trusted afterwards (on vLLM 0.26.0 a failed
    sleep leaves the scheduler paused and the memory discarded), so the probe ends there."""


class Probe:
    def __init__(self, client: EngineClient, model: str, plans: dict, rule: int,
                 log_path: Path, out: Path, max_tokens: int) -> None:
        self.client, self.model, self.plans, self.log_path = client, model, plans, log_path
        self.rule = rule
        self.out, self.max_tokens = out, max_tokens
        self.rows: list[dict] = []
        self.first: str | None = None

    async def ask(self, step: str, residue: int, **extra) -> dict:
        plan = self.plans[residue]
        res = await self.client.chat(plan.messages, model=self.model, max_tokens=self.max_tokens)
        j = judge(res.answer, source=plan.document, expected=plan.expected,
                  finish_reason=res.finish_reason)
        row = {"step": step, "residue": residue, "verdict": j.verdict, "sha1": sha1(res.answer),
               "answer_head": res.answer[:80], "cached_tokens": res.cached_tokens,
               "prompt_tokens": res.prompt_tokens, "latency_s": round(res.latency_s, 4), **extra}
        if step == "first":
            self.first = res.answer
        row["same_as_first"] = res.answer == self.first
        self.rows.append(row)
        with open(self.out / "probe.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    async def others(self) -> None:
        for r in self.plans:
            if r != self.rule:
                await self.client.chat(self.plans[r].messages, model=self.model,
                                       max_tokens=self.max_tokens)

    async def timed(self, what: str, coro) -> dict:
        t = time.monotonic()
        try:
            proof = await coro
        except RestoreFailed as e:
            return {what: "failed", "error": str(e)}
        return {what + "_s": round(time.monotonic() - t, 4),
                **({"proof": proof} if isinstance(proof, dict) else {})}

    async def restored(self, step: str) -> dict:
        """One restore (harness/serve/restore.py) before ``step``; a failure is the step's row
        (nothing sent) and ends the probe."""
        got = await self.timed("restore", restore_server(self.client, self.log_path))
        if got.get("restore") == "failed":
            self.rows.append({"step": step, "residue": self.rule, "verdict": "not sent",
                              "sha1": "", "answer_head": f"restore failed: {got['error']}",
                              "cached_tokens": "", "same_as_first": "", "error": got["error"]})
            with open(self.out / "probe.jsonl", "a") as f:
                f.write(json.dumps(self.rows[-1]) + "\n")
            raise ProbeStopped(f"{step}: the restore failed ({got['error']}); a server whose "
                               "sleep failed is not reused, the probe stops here")
        return got

    async def run(self) -> None:
        c, rule = self.client, self.rule
        await self.ask("first", rule)
        await self.ask("self-hit", rule)
        await c.reset_prefix_cache()
        await self.ask("reset", rule)
        await self.others()
        await c.reset_prefix_cache()
        await self.ask("others+reset", rule)
        await self.ask("restore", rule, **await self.restored("restore"))
        for n in (1, 2):
            await self.others()
            await self.ask(f"others+restore#{n}", rule, **await self.restored(f"others+restore#{n}"))
        await self.others()
        t = time.monotonic()
        await c.sleep(level=1)
        await c.wake_up()
        await self.ask("others+sleep-wake", rule, sleep_wake_s=round(time.monotonic() - t, 4))
        await self.others()
        await c.reset_prefix_cache()
        await self.ask("others+reset#2", rule)


def _table(rows: list[dict]) -> str:
    head = "| step | residue | verdict | same as first | cached | sha1 | answer (head) | cost |\n"
    head += "|---|---|---|---|---|---|---|---|\n"
    out = []
    for r in rows:
        cost = r.get("restore_s") or r.get("sleep_wake_s") or ""
        ans = json.dumps(r["answer_head"])[1:-1].replace("|", "\\|")
        out.append(f"| {r['step']} | {r['residue']} | {r['verdict']} | {r['same_as_first']} | "
                   f"{r['cached_tokens']} | {r['sha1'][:12]} | `{ans}` | {cost} |")
    return head + "\n".join(out) + "\n"


async def _main(ns: argparse.Namespace, sweep_argv: list[str]) -> int:
    opts = options_from_argv(sweep_argv)
    cfg = opts.serving.configs[0]
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.jsonl").unlink(missing_ok=True)
    adapter = make_adapter(opts.serving.engine, draft_model=opts.serving.draft_model,
                           extra_args=opts.serving.engine_args, work_dir=out, isolation="restore",
                           cache_dir=opts.serving.cache_dir)
    tok = ChatTokenizer.from_dir(adapter.tokenizer_dir(cfg))
    modulus = int(cfg.prefix_match_unit or cfg.block_size)
    cal = calibrate(tok.count_many, opts.measure.context, modulus, answer_lines=opts.measure.answer_lines,
                    seed=opts.measure.documents[0], line_counts=tok.line_token_counts)
    residues = [ns.residue] + [r for r in ns.others if r != ns.residue]
    plans = {r: plan_residue(cal, r, modulus) for r in residues}
    port = PortAllocator().acquire()
    slot = Slot("gpu0", ns.gpu) if ns.gpu is not None else Slot("cpu0")
    argv, env = adapter.command(cfg, port, slot)
    if ns.gpu is not None:
        env = {"CUDA_VISIBLE_DEVICES": ns.gpu, **env}
    log_path = Path(ns.server_log_dir or out) / "probe-server.log"
    server = ServerProcess(argv, env, port, log_path, slot)
    (out / "probe-command.txt").write_text(" ".join(map(str, argv)) + "\n" + json.dumps(env) + "\n")
    stopped = 0
    async with EngineClient(server.base_url, timeout=opts.running.timeout) as client:
        try:
            server.start()
            await server.wait_ready(client, opts.running.boot_timeout)
            model = adapter.model_name(cfg) or (await client.models())[0]["id"]
            probe = Probe(client, model, plans, ns.residue, log_path, out, opts.measure.max_tokens)
            try:
                await probe.run()
            except ProbeStopped as e:
                print(f"restore_probe.py: {e}", file=sys.stderr)
                stopped = 1
            finally:
                (out / "probe.md").write_text(
                    f"# restore probe: {cfg.label()}, document {opts.measure.documents[0]}, boot "
                    f"{server.boot_s or 0:.1f} s\n\n" + _table(probe.rows))
        finally:
            await server.stop()
    print((out / "probe.md").read_text())
    return stopped


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sweep_argv = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="restore_probe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--residue", type=int, default=3, help="the rule's residue (default 3)")
    p.add_argument("--others", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4],
                   help="other residues of the document, comma list (default 2,4)")
    p.add_argument("--gpu", default=None, help="CUDA_VISIBLE_DEVICES of the server")
    p.add_argument("--server-log-dir", default=None)
    ns = p.parse_args(own)
    return asyncio.run(_main(ns, sweep_argv))


if __name__ == "__main__":
    sys.exit(main())
