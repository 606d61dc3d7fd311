"""A stand-in for llama-cpp-python's OpenAI server (used where that package
is not installed): it lists its model by the GGUF file's path, and answers a
token-id prompt on /v1/completions as llama-cpp-python 0.3 does, a 500 whose
message is the request's validation error (its route handler turns every
exception into a 500). Text prompts are answered with a short streamed text.
Every completion call is counted, and each refused one."""

from __future__ import annotations

import json
import threading

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.listening import listening_socket
from tests.waiting import wait_until

MODEL_ID = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ANSWER = "Hello from the CPU server."
VALIDATION = ("1 validation error for CreateCompletionRequest\nprompt\n  Input should be a "
              "valid string [type=string_type, input_value=[1, 2, 3], input_type=list]")


class LlamaStandIn:
    def __init__(self):
        self.calls = 0
        self.refused = 0
        self.prompts: list = []
        app = Starlette(routes=[Route("/v1/models", self._models),
                                Route("/v1/completions", self._completions, methods=["POST"])])
        self._socket = listening_socket()
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._socket]}, daemon=True)

    def start(self) -> "LlamaStandIn":
        self._thread.start()
        assert wait_until(lambda: self._server.started, 30), "the stand-in server did not start"
        return self

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()

    async def _models(self, request: Request):
        return JSONResponse({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    async def _completions(self, request: Request):
        body = await request.json()
        self.calls += 1
        self.prompts.append(body.get("prompt"))
        if not isinstance(body.get("prompt"), str):
            self.refused += 1
            return JSONResponse({"error": {"message": VALIDATION, "type": "internal_server_error",
                                           "param": None, "code": None}}, status_code=500)

        async def events():
            words = ANSWER.split(" ")
            for i, word in enumerate(words):
                text = word if i == 0 else " " + word
                yield "data: " + json.dumps({"choices": [{"text": text, "index": 0,
                                                          "finish_reason": None}]}) + "\n\n"
            yield "data: " + json.dumps({"choices": [{"text": "", "index": 0,
                                                      "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 10,
                                                   "completion_tokens": len(words)}}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
