"""Command line: `tandem` starts the GUI; `tandem generate "prompt"` streams an
answer to the terminal and prints its stats; `tandem --self-test [--gui]`
checks that this copy works (see app/selftest.py)."""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tandem", description=__doc__)
    parser.add_argument("--model", default="default",
                        help="'default', a .gguf file, a model folder or a Hugging Face repo id")
    parser.add_argument("--self-test", action="store_true",
                        help="headless check: load the model, generate a few tokens, exit 0")
    parser.add_argument("--gui", action="store_true",
                        help="with --self-test: open the window instead and answer one message")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="answer one prompt in the terminal")
    gen.add_argument("prompt")
    gen.add_argument("--system", default=None, help="system prompt")
    gen.add_argument("--max-tokens", type=int, default=256)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    return parser


def generate(args) -> int:
    from engine import Engine, EngineError, Finished, SamplingParams, Token

    try:
        engine = Engine.load(args.model)
    except EngineError as e:
        print(f"tandem: {e}", file=sys.stderr)
        return 2
    messages = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    messages.append({"role": "user", "content": args.prompt})
    try:
        handle = engine.submit(messages, SamplingParams(
            max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
            seed=args.seed))
        done = None
        for event in handle:
            if isinstance(event, Token):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Finished):
                done = event
    except EngineError as e:
        print(f"tandem: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        handle.cancel()
        done = handle.result(10)
    finally:
        engine.close()
    print(flush=True)
    tps = f"{done.tokens_per_s:.1f}" if done.tokens_per_s else "-"
    ttft = f"{done.ttft_s * 1000:.0f} ms" if done.ttft_s is not None else "-"
    lanes = " -> ".join(f"{phase} {lane}" for phase, lane in done.lanes)
    print(f"[{done.reason}] prompt {done.prompt_tokens} tokens ({done.cached_tokens} cached), "
          f"output {done.output_tokens} tokens, TTFT {ttft}, {tps} tokens/s, "
          f"total {done.e2e_s:.2f} s; {lanes}", file=sys.stderr)
    return 1 if done.reason == "error" else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Finder on older macOS passes a process serial number to .app bundles.
    args = _parser().parse_args([a for a in argv if not a.startswith("-psn_")])
    if args.self_test:
        from app.selftest import run

        return run(args.model, gui=args.gui)
    if args.command == "generate":
        return generate(args)
    from app.main_window import run_gui

    return run_gui(args.model)
