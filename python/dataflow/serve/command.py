"""`dataflow serve`: load a model, start the engine thread and the HTTP server; on SIGTERM or
SIGINT stop listening, let the requests in flight finish (for up to --shutdown-timeout
seconds, then cancel them), stop the engine and exit 0."""
import asyncio
import functools
import os
import signal
import sys

from ..models.batch_engine import BatchEngine
from ..errors import BadArgumentError
from . import chat_template


async def _run(app, args):
    from aiohttp import web
    runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True,
                           shutdown_timeout=args.shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise BadArgumentError(f"--port: cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    host, port = runner.addresses[0][:2]
    print(f"dataflow serve: {args.served_model_name} on http://{host}:{port} (OpenAI API under /v1)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("dataflow serve: shutting down: finishing the requests in flight", file=sys.stderr, flush=True)
    await runner.cleanup()


def serve(args, load):
    """load(args, handle) -> (model, tokenizer, bos), as `dataflow generate` loads."""
    try:
        from .app import Server, make_app, visible_text
    except ImportError as e:
        raise BadArgumentError(f"dataflow serve needs aiohttp: pip install 'dataflow[serve]' ({e})") from None
    from ..cli.train import open_handle
    args.served_model_name = args.served_model_name or os.path.basename(os.path.normpath(args.checkpoint))
    handle = open_handle(args)
    try:
        model, tokenizer, bos = load(args, handle)
        template = chat_template.load(args.checkpoint) if os.path.isdir(args.checkpoint) else None
        context = min(model.config.max_position_embeddings, args.max_seq_tokens or sys.maxsize)
        engine = BatchEngine(model, page_size=args.page_size, max_seqs=args.max_batch, max_seq_tokens=context,
                             max_batch_tokens=args.max_batch_tokens, decode=functools.partial(visible_text, tokenizer))
        from .engine_loop import EngineLoop
        loop = EngineLoop(engine)
        loop.start()
        try:
            server = Server(loop, tokenizer, args.served_model_name, context, model.config.vocab_size, bos, template,
                            max_requests=args.max_batch + args.queue)
            asyncio.run(_run(make_app(server), args))
        finally:
            loop.stop()
            engine.close()
        model.close()
        return 0
    finally:
        handle.close()
