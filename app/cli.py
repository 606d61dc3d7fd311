"""Command line: `tandem` starts the GUI; `tandem generate "prompt"` streams an
answer to the terminal and prints its stats (`-` or `--file PATH` read the
prompt from stdin or a file; `--raw` sends it as text to continue, for a base
model); `tandem --self-test [--gui]` checks that this copy works (see
app/selftest.py)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import traceback
from typing import NoReturn

from app import tool_cli
from app.cli_engine import kv_cache_dir, load_engine
from app.cli_exit import (INTERRUPTED, close_engine, crash_stacks, end_now, handled,
                          interrupt_on_ctrl_c, term_as_interrupt)
from app.ui.answer_stats import matmul_note, stats_line
from app.ui.prompt_input import PromptError, argument_text, read_prompt
# Every line printed that may hold outside text (a model's answer, a remote's
# error, a client's request path) goes through it: no escape code reaches the terminal.
from app.ui.terminal import terminal_text
from engine import CONTEXT_POLICIES

MODEL_HELP = ("'default' (the bundled model; the default), a .gguf file, a model folder or a "
              "Hugging Face repo id")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default in its help, where it has one to show."""

    def _get_help_string(self, action):
        default = action.default
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tandem", description=__doc__)
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    parser.add_argument("--self-test", action="store_true",
                        help="headless check: load the model, generate a few tokens, exit 0")
    parser.add_argument("--gui", action="store_true",
                        help="with --self-test: open the window instead and answer one message")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="answer one prompt in the terminal",
                         description="Stream an answer to the terminal, then its stats.",
                         formatter_class=_Help)
    gen.add_argument("prompt", nargs="?", help="the prompt; '-' reads it from stdin")
    gen.add_argument("--file", default=None, help="read the prompt from this file (UTF-8)")
    # Also accepted after `generate`; SUPPRESS keeps the top-level value otherwise.
    gen.add_argument("--model", default=argparse.SUPPRESS, help=MODEL_HELP)
    gen.add_argument("--remote", action="append", default=[], metavar="URL[#MODEL[=LOCAL]]",
                     help=REMOTE_HELP)
    gen.add_argument("--system", default=None, help="system prompt (none: the model's own)")
    gen.add_argument("--raw", action="store_true",
                     help="send the prompt as plain text for the model to continue, not as a "
                          "chat message (a base model, which has no chat template; BOS added "
                          "where its tokenizer adds one), as the API's /v1/completions does")
    gen.add_argument("--max-tokens", type=int, default=256,
                     help="the answer's length limit, in tokens")
    # Sampling: the model's own defaults (as the app and the API use them),
    # each option given overriding its field (sampling_params).
    gen.add_argument("--temperature", type=float, default=None,
                     help="0 picks the likeliest token each time (greedy); higher varies "
                          "more (default: the model's own, else 0.7)")
    gen.add_argument("--top-p", type=float, default=None,
                     help="sample only from the likeliest tokens whose probabilities add "
                          "up to this (1: all; default: the model's own, else 0.95)")
    gen.add_argument("--top-k", type=int, default=None,
                     help="sample only from this many of the likeliest tokens (0: all; "
                          "default: the model's own, else 40)")
    gen.add_argument("--min-p", type=float, default=None,
                     help="leave out tokens less likely than this fraction of the likeliest "
                          "(0: none; default: the model's own, else 0.05)")
    gen.add_argument("--repetition-penalty", type=float, default=None,
                     help="above 1 makes tokens already in the text less likely, greedy or "
                          "not (1: off; default: the model's own, else 1.1)")
    gen.add_argument("--seed", type=int, default=None,
                     help="random seed, for the same answer again when sampling")
    _add_engine_options(gen)
    tool_cli.add_arguments(gen)
    _serve_parser(sub)
    return parser


def _serve_parser(sub) -> None:
    """`tandem serve`'s arguments."""
    serve = sub.add_parser("serve", help="an OpenAI-compatible API on this machine",
                           description="Serve the OpenAI API (/v1/chat/completions, "
                                       "/v1/completions, /v1/responses, /v1/embeddings, "
                                       "/v1/models) and "
                                       "Anthropic's /v1/messages on this machine.",
                           formatter_class=_Help)
    serve.add_argument("--model", default=argparse.SUPPRESS, help=MODEL_HELP)
    serve.add_argument("--remote", action="append", default=[], metavar="URL[#MODEL[=LOCAL]]",
                       help=REMOTE_HELP)
    serve.add_argument("--embedding-model", default=None, metavar="M",
                       help="a BERT-style embedding model (folder or repo id) for "
                            "/v1/embeddings, loaded beside the chat model")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (other than localhost needs --api-key)")
    serve.add_argument("--port", type=int, default=8080,
                       help="port to listen on (0: a free one, printed when ready)")
    serve.add_argument("--api-key", default=None,
                       help="required as a Bearer token (and to bind other than localhost)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also answer requests whose Host header names NAME (repeatable)")
    serve.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="let web pages from ORIGIN call the API, with CORS (repeatable)")
    serve.add_argument("--allow-image-urls", action="store_true",
                       help="fetch http(s) image URLs in requests (public addresses only, "
                            "no redirects, 20 MiB and 10 s an image, 30 s a request); "
                            "without it, images come as data: URLs or base64")
    serve.add_argument("--alias", action="append", default=[], metavar="NAME=MODEL",
                       help="also answer requests for model NAME with MODEL (a served model "
                            "id, or 'default'), e.g. claude-opus-4-8=default for Claude "
                            "Code's default model; NAME may be a pattern ('claude-*=default'); "
                            "repeatable")
    serve.add_argument("--context-overflow", default="error", choices=CONTEXT_POLICIES,
                       help="past the model's context: refuse (error), or let the oldest "
                            "turns after the first (truncate_middle) or of all "
                            "(rolling_window) leave its view; a request's context_overflow wins")
    _add_engine_options(serve)

def _add_engine_options(command) -> None:
    """Drafts and the disk tier: how the engine of `generate` and `serve` runs."""
    command.add_argument("--draft", choices=("auto", "off", "lookup", "model"), default="auto",
                         help="drafts: tokens proposed ahead and verified several in one "
                              "forward where that pays (the same text either way). lookup: "
                              "from the prompt and what the answer wrote (copying, quoting, "
                              "editing); model: from --draft-model; auto: the draft model "
                              "if given, else lookup")
    command.add_argument("--kv-cache-dir", default=None, metavar="DIR",
                         help="keep finished answers' KV here, so the next run resumes a "
                              "conversation warm (default: Tandem's cache folder)")
    command.add_argument("--no-kv-cache", action="store_true",
                         help="neither save KV to disk nor read it back")
    command.add_argument("--draft-model", default=None, metavar="MODEL",
                         help="a small model with the same tokenizer that drafts (" +
                              "a GGUF file, a model folder or a repo id)")


REMOTE_HELP = ("an OpenAI-compatible server to route to as a remote lane, "
               "URL[#MODEL[=LOCAL]] (https, or http on this machine); MODEL its model id, "
               "LOCAL the loaded model it serves when its id is another name (the model's "
               "name, or 'default'); repeatable. Its API key, if it needs "
               "one, from $TANDEM_REMOTE_KEY")


def serve(args) -> int:
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        print("tandem: binding another address than localhost needs --api-key", file=sys.stderr)
        return 2
    from server.aliases import parse_alias

    try:
        aliases = tuple(parse_alias(text) for text in args.alias)
    except ValueError as e:
        print(terminal_text(f"tandem: {e}"), file=sys.stderr)
        return 2
    # SIGINT and SIGTERM stop it at any stage, the engine closed in order (cli_exit.py).
    with term_as_interrupt():
        try:
            engine = load_engine(args.model, args.remote, args.draft, args.draft_model,
                                 kv_cache_dir(args), args.embedding_model)
        except KeyboardInterrupt:  # while loading: what had started is closed
            print("Tandem serve stopped.", flush=True)
            return 0
        if engine is None:
            return 2
        try:
            return _serve(args, engine, aliases)
        except KeyboardInterrupt:  # before it listened
            print("Tandem serve stopped.", flush=True)
            return 0
        finally:
            close_engine(engine)  # no-op once closed


def _serve(args, engine, aliases) -> int:
    """Serve until SIGINT or SIGTERM; the engine closed as it stops."""
    import uvicorn

    from server.api import ServerConfig, make_app
    from server.image_urls import ImageFetcher

    try:
        app = make_app(engine, ServerConfig(
            api_key=args.api_key, host=args.host, allow_hosts=tuple(args.allow_host),
            allow_origins=tuple(args.allow_origin), aliases=aliases,
            image_urls=ImageFetcher() if args.allow_image_urls else None,
            context_overflow=args.context_overflow),
            access_log=lambda line: print(terminal_text(line), flush=True))
    except ValueError as e:  # an alias to a model this server does not serve
        print(terminal_text(f"tandem: {e}"), file=sys.stderr)
        return 2
    host = f"[{args.host}]" if ":" in args.host else args.host

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):
            await super().startup(sockets)
            if self.started:  # listening now (a taken port ends here instead)
                port = args.port
                for server in getattr(self, "servers", []):  # --port 0: the one it got
                    for sock in server.sockets:
                        port = sock.getsockname()[1]
                also = "".join(f", {name!r} (an alias)" for name, _ in aliases)
                print(f"Tandem serves {', '.join(repr(i) for i in app.state.ids)}{also} at "
                      f"http://{host}:{port}/v1 (Ctrl+C stops)", flush=True)

        async def shutdown(self, sockets=None):
            await super().shutdown(sockets)  # requests under way are answered first
            close_engine(engine)
            print("Tandem serve stopped.", flush=True)

        @contextlib.contextmanager
        def capture_signals(self):
            # uvicorn's handler (a second Ctrl+C: at once), but the signal is
            # not raised again once stopped: the process ends normally, exit 0.
            with handled(self.handle_exit):
                yield

    Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")).run()
    return 0


SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def sampling_params(engine, args):
    """The answer's sampling: the model's own defaults (`engine.default_params`,
    as the app gives a new chat and the API a request that leaves a field
    out), each sampling option given on the command line overriding its field;
    EngineError for a value out of range."""
    given = {name: getattr(args, name) for name in SAMPLING if getattr(args, name) is not None}
    return engine.default_params(max_tokens=args.max_tokens, seed=args.seed, **given)


NO_TEMPLATE = ("{model} has no chat template: it is a base model, which continues text rather "
               "than answering chat messages. Give --raw to send the prompt as text for it "
               "to continue.")


def _option_problem(args) -> str | None:
    """Options that cannot go together, said before anything loads."""
    if args.list_tools and not args.mcp:
        return "--list-tools lists the tools of the servers in --mcp CONFIG: give --mcp"
    if args.raw and args.mcp:
        return ("--raw sends the prompt as plain text, and tools need a chat: leave out "
                "--mcp or --raw")
    if args.raw and args.system:
        return "--raw sends the prompt as plain text, with no system prompt: leave out --system"
    return None


def generate(args) -> int:
    problem = _option_problem(args)
    if problem:
        print(f"tandem: {problem}", file=sys.stderr)
        return 2
    if args.list_tools:  # the tokenizer only, not the model (app/tool_cli.py)
        return tool_cli.list_tools(args)
    try:  # before the engine's imports (~1 s): a bad prompt fails at once
        prompt = read_prompt(args)
        system = argument_text(args.system, "the system prompt") if args.system else None
    except PromptError as e:
        print(terminal_text(f"tandem: {e}"), file=sys.stderr)
        return 2
    from engine.models.tokenizer_only import declares_chat_template

    no_template = terminal_text(f"tandem: {NO_TEMPLATE.format(model=args.model)}")
    if not args.raw and declares_chat_template(args.model) is False:  # before the weights
        print(no_template, file=sys.stderr)
        return 2
    from engine import EngineError, Finished, Token

    try:
        engine = load_engine(args.model, args.remote, args.draft, args.draft_model,
                             kv_cache_dir(args))
    except KeyboardInterrupt:  # Ctrl+C while loading: what had started is closed
        return INTERRUPTED
    if engine is None:
        return 2
    if not args.raw and not engine.capabilities.chat:  # what the files did not tell
        close_engine(engine)
        print(no_template, file=sys.stderr)
        return 2
    messages = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    if args.mcp:  # the tool loop (app/tool_cli.py)
        try:
            return tool_cli.generate_with_tools(args, engine, messages,
                                                sampling_params(engine, args))
        except EngineError as e:
            print(terminal_text(f"tandem: {e}"), file=sys.stderr)
            return 2
        finally:
            close_engine(engine)
    handle = done = None
    shown = []  # the answer's text as printed so far
    try:
        if args.raw:  # the text as it is, tokenized as /v1/completions does
            handle = engine.submit(engine.prepare_prompt(prompt), sampling_params(engine, args),
                                   thinking=False)
        else:
            handle = engine.submit(messages, sampling_params(engine, args))
        for event in handle:
            if isinstance(event, Token):
                shown.append(event.text)
                sys.stdout.write(terminal_text(event.text))
                sys.stdout.flush()
            elif isinstance(event, Finished):
                done = event
    except EngineError as e:
        print(terminal_text(f"tandem: {e}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the answer so far and its stats, then 130 (cli_exit.py)
        if handle is not None:  # (None: interrupted before the request was queued)
            handle.cancel()
            with handled(lambda *_: None):  # a second Ctrl+C: its end is on its way
                done = handle.result(10)
        if done is None or done.reason in ("cancelled", "error"):
            return _said(done, INTERRUPTED, engine)
        # It had ended on its own before the cancel reached it (Ctrl+C as its
        # last events were on their way): the answer is whole, said whole.
        _rest(done.text, "".join(shown))
    finally:
        close_engine(engine)  # whole: its last KV save written, its threads parked
    return _said(done, 1 if done.reason == "error" else 0, engine)


def _rest(text: str, shown: str) -> None:
    """Print what of the answer's `text` was not `shown` yet."""
    if text.startswith(shown) and len(text) > len(shown):
        sys.stdout.write(terminal_text(text[len(shown):]))
        sys.stdout.flush()


def _said(done, code: int, engine=None) -> int:
    """The answer's last line and its stats (if it was queued), with what the
    CPU lanes it ran on multiplied with (issue 51); `code`."""
    if done is not None:
        print(flush=True)
        print(terminal_text(stats_line(done) + matmul_note(engine, done)), file=sys.stderr)
    return code



def main(argv: list[str] | None = None) -> int:
    return _command(_arguments(sys.argv[1:] if argv is None else argv))


def _arguments(argv: list[str]) -> argparse.Namespace:
    crash_stacks()
    # Finder on older macOS passes a process serial number to .app bundles.
    return _parser().parse_args([a for a in argv if not a.startswith("-psn_")])


def _command(args: argparse.Namespace) -> int:
    from engine import openblas_advice  # importing engine tries to load OpenBLAS

    advice = openblas_advice()
    if advice:  # otherwise the only symptom is a slow app
        print(f"tandem: {advice}", file=sys.stderr, flush=True)
    if args.self_test:
        from app.selftest import run

        return run(args.model, gui=args.gui)
    if args.command == "generate":
        return generate(args)
    if args.command == "serve":
        return serve(args)
    from app.gui import run_gui

    return run_gui(args.model)


def run() -> NoReturn:
    """The `tandem` command (python -m app, the bundle): `main`, then
    `generate` and `serve`, their engine closed, end the process at once
    (cli_exit.end_now); the app and the self-test end as Python does."""
    args = _arguments(sys.argv[1:])  # (--help, a bad option: SystemExit here)
    if args.self_test or args.command not in ("generate", "serve"):
        sys.exit(_command(args))
    interrupt_on_ctrl_c()
    try:
        code = _command(args)
    except SystemExit as e:  # (uvicorn's, when its port is taken)
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except KeyboardInterrupt:  # before there was an engine: as cli_exit.py says
        code = 0 if args.command == "serve" else INTERRUPTED
    except BaseException:  # a bug: said as Python says it
        traceback.print_exc()
        code = 1
    end_now(code)
