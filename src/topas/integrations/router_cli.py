"""``topas router`` (and ``python -m topas.integrations.router_cli``): the command line of the
HTTP router service (:class:`~topas.integrations.router_service.RouterService`)."""

from __future__ import annotations

import argparse
import logging
import sys

from topas.engine.cost import DEFAULT_PROFILE
from topas.integrations.router_backend import _one_line
from topas.integrations.router_service import RouterService
from topas.routing import DEFAULT_ROUTER, ROUTERS, parse_router_params

__all__ = ["add_arguments", "cli_router", "main"]


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        action="append",
        metavar="URL",
        required=True,
        help="a backend server's base URL, e.g. http://127.0.0.1:8001 (repeat for each backend)",
    )
    p.add_argument(
        "--router",
        default=DEFAULT_ROUTER,
        help=f"router name: {', '.join(ROUTERS)} (default {DEFAULT_ROUTER})",
    )
    p.add_argument(
        "--router-param",
        action="append",
        metavar="KEY=VALUE",
        help="a router parameter, e.g. --router-param balance_abs=8 (repeatable)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help="engine profile name or .json "
        f"path for the routers' cost model and KV budget (default {DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--kv-budget-tokens",
        type=int,
        default=None,
        help="per-backend KV tokens "
        "of the service's prefix/context LRU (default: the profile's budget)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to wait for a backend's answer (default 600)",
    )
    p.add_argument("--verbose", action="store_true", help="log every request")


def add_arguments(subparsers) -> None:
    """Register ``topas router`` (called by :func:`topas.cli.build_parser`)."""
    p = subparsers.add_parser(
        "router",
        help="an OpenAI-compatible HTTP router in front of "
        "several vLLM servers, placing calls with a TOPAS router",
    )
    _configure(p)
    p.set_defaults(fn=cli_router, func=cli_router)


def cli_router(args: argparse.Namespace) -> int:
    """Run the service until Ctrl-C; a bad backend URL, router name or parameter is a one-line
    ValueError (``topas router: error: ...``)."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port}: must be in 0..65535")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(message)s",
    )
    svc = RouterService(
        args.backend,
        router=args.router,
        router_params=parse_router_params(args.router_param),
        host=args.host,
        port=args.port,
        profile=args.profile,
        kv_budget_tokens=args.kv_budget_tokens,
        timeout_s=args.timeout,
    )
    svc._bind()
    down = [b.url for b in svc.backends if not svc.backend_healthy(b, timeout=1.0)]
    print(
        f"topas router: {svc.router.name} over {len(svc.backends)} backends at {svc.url}"
        + (f" (not healthy yet: {', '.join(down)})" if down else ""),
        flush=True,
    )
    try:
        svc._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        svc._server.server_close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m topas.integrations.router_cli --backend URL ...``: same as
    ``topas router``."""
    ap = argparse.ArgumentParser(
        prog="topas-router", description="OpenAI-compatible router over several vLLM servers"
    )
    _configure(ap)
    args = ap.parse_args(argv)
    try:
        return cli_router(args)
    except ValueError as e:
        print(f"topas-router: error: {_one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
