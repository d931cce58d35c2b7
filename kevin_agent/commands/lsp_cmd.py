"""``kevin lsp [--tcp PORT]``: the language server for VS Code, Neovim and other LSP editors."""

from __future__ import annotations

import argparse
import logging
import sys

from kevin_agent.errors import EnvironmentProblem, UserInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tcp", type=int, metavar="PORT", default=None,
                        help="listen on 127.0.0.1:PORT instead of speaking over stdin/stdout")
    parser.add_argument("--host", default="127.0.0.1", help="address for --tcp (default 127.0.0.1)")
    parser.add_argument("--log-file", default=None, help="write the server's own log here")
    parser.add_argument("--stdio", action="store_true", help="accepted for editors that pass it (default)")


def run(args: argparse.Namespace) -> int:
    if args.tcp is not None and not 0 < args.tcp < 65536:
        raise UserInputError(f"--tcp {args.tcp}: a port is 1 to 65535")
    if args.log_file:
        logging.basicConfig(filename=args.log_file, level=logging.INFO)
    else:  # stdout carries the protocol: the server's own log goes to stderr, warnings only
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    try:
        from kevin_agent.lsp.server import create_server
    except ImportError as err:
        raise EnvironmentProblem(f"the language server needs pygls and lsprotocol: {err}") from None
    server = create_server()
    if args.tcp is not None:
        server.start_tcp(args.host, args.tcp)
    else:
        server.start_io()
    return 0
