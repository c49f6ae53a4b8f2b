#!/usr/bin/env python3
"""Capture server: logs every request and answers like Anthropic / OpenAI Responses.

Usage: capture_server.py PORT OUTDIR
Each request -> OUTDIR/NNNN_<method>_<path>.json  {method, path, headers, body|raw_body}
If the user prompt contains "TOOLTEST" and the request offers a shell tool, the
first reply is a tool call; once a tool result comes back, reply with text.
"""

import gzip
import json
import os
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
OUTDIR = sys.argv[2]
os.makedirs(OUTDIR, exist_ok=True)
_lock = threading.Lock()
_counter = [0]
SECRET_HEADERS = {"authorization", "x-api-key", "cookie", "proxy-authorization", "openai-api-key"}
RESPONSES = {}  # id -> response object (for GET /v1/responses/{id})


def redact(k, v):
    if k.lower() in SECRET_HEADERS:
        if v.lower().startswith("bearer "):
            return "Bearer <redacted len=%d>" % (len(v) - 7)
        return "<redacted len=%d>" % len(v)
    return v


def log_request(method, path, headers, raw):
    with _lock:
        _counter[0] += 1
        n = _counter[0]
    rec = {
        "seq": n,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "method": method,
        "path": path,
        "headers": {k: redact(k, v) for k, v in headers.items()},
    }
    body = None
    enc = (headers.get("Content-Encoding") or "").lower()
    data = raw
    try:
        if enc == "gzip":
            data = gzip.decompress(raw)
        elif enc == "deflate":
            data = zlib.decompress(raw)
        elif enc == "zstd":
            rec["note"] = "zstd body not decoded"
    except Exception as e:  # noqa
        rec["decode_error"] = repr(e)
    if data:
        try:
            body = json.loads(data)
            rec["body"] = body
        except Exception:
            rec["raw_body"] = data[:20000].decode("utf-8", "replace")
    safe = path.split("?")[0].strip("/").replace("/", "_")[:60] or "root"
    fn = os.path.join(OUTDIR, "%04d_%s_%s.json" % (n, method, safe))
    with open(fn, "w") as f:
        json.dump(rec, f, indent=2, ensure_ascii=False)
    sys.stderr.write("[%d] %s %s -> %s\n" % (n, method, path, fn))
    sys.stderr.flush()
    return body


def text_of(content):
    if isinstance(content, str):
        return content
    out = []
    if isinstance(content, list):
        for b in content:
            if isinstance(b, dict):
                if isinstance(b.get("text"), str):
                    out.append(b["text"])
                if "content" in b:
                    out.append(text_of(b["content"]))
    return "\n".join(out)


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    # ---- helpers
    def _read(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                line = self.rfile.readline().strip()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _json(self, code, obj, extra=None):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b)

    def _sse_start(self, extra=None):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def _chunk(self, s):
        b = s.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()

    def _sse_end(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, name, data):
        self._chunk("event: %s\ndata: %s\n\n" % (name, json.dumps(data)))

    # ---- dispatch
    def _handle(self):
        raw = self._read()
        body = log_request(self.command, self.path, self.headers, raw)
        p = self.path.split("?")[0]
        if p.startswith("/v1/v1/"):
            p = p[3:]
        try:
            if self.command == "POST" and p == "/v1/messages":
                return self.anthropic_messages(body or {})
            if self.command == "POST" and p == "/v1/messages/count_tokens":
                return self._json(200, {"input_tokens": 100})
            if self.command == "POST" and p == "/v1/responses":
                return self.openai_responses(body or {})
            if self.command == "GET" and p.startswith("/v1/responses/"):
                rid = p.rsplit("/", 1)[1]
                if rid in RESPONSES:
                    return self._json(200, RESPONSES[rid])
            if self.command == "DELETE" and p.startswith("/v1/responses/"):
                rid = p.rsplit("/", 1)[1]
                RESPONSES.pop(rid, None)
                return self._json(200, {"id": rid, "object": "response.deleted", "deleted": True})
            if self.command in ("GET", "HEAD") and p == "/v1/models":
                now = int(time.time())
                return self._json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": m, "object": "model", "created": now, "owned_by": "capture"}
                            for m in ("test-model", "gpt-5-codex", "claude-sonnet-4-5")
                        ],
                        "has_more": False,
                        "first_id": "test-model",
                        "last_id": "claude-sonnet-4-5",
                    },
                )
        except (BrokenPipeError, ConnectionResetError):
            return
        self._json(
            404,
            {
                "error": {
                    "message": "not found: %s %s" % (self.command, self.path),
                    "type": "not_found_error",
                }
            },
        )

    do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = do_PATCH = do_OPTIONS = _handle

    # ---- Anthropic
    def anthropic_messages(self, body):
        model = body.get("model", "unknown")
        msgs = body.get("messages") or []
        if os.environ.get("REJECT_MID_SYSTEM") and any(m.get("role") == "system" for m in msgs):
            return self._json(
                400,
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": 'messages: Unexpected role "system". The input message role must be "user" or "assistant"',
                    },
                },
            )
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        last = msgs[-1] if msgs else {}
        last_has_result = isinstance(last.get("content"), list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"]
        )
        alltext = "\n".join(text_of(m.get("content")) for m in msgs)
        tool_call = None
        if "TOOLTEST" in alltext and "Bash" in tools and not last_has_result:
            tool_call = {
                "type": "tool_use",
                "id": "toolu_" + uuid.uuid4().hex[:20],
                "name": "Bash",
                "input": {"command": "echo hi", "description": "Print hi"},
            }
        mid = "msg_" + uuid.uuid4().hex[:24]
        usage = {
            "input_tokens": 100,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        stop = "tool_use" if tool_call else "end_turn"
        content = [tool_call] if tool_call else [{"type": "text", "text": "hi"}]
        if not body.get("stream"):
            return self._json(
                200,
                {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage,
                },
                {"request-id": "req_" + mid},
            )
        self._sse_start({"request-id": "req_" + mid})
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
        idx = 0
        if os.environ.get("REASONING"):
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
            self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "The user wants a greeting."},
                },
            )
            self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJlLXRlc3Q="},
                },
            )
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            idx = 1
        if tool_call:
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": idx,
                    "content_block": {**tool_call, "input": {}},
                },
            )
            self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": idx,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(tool_call["input"]),
                    },
                },
            )
        else:
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": idx,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            self._event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": idx,
                    "delta": {"type": "text_delta", "text": "hi"},
                },
            )
        self._event("content_block_stop", {"type": "content_block_stop", "index": idx})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        self._event("message_stop", {"type": "message_stop"})
        self._sse_end()

    # ---- OpenAI Responses
    def openai_responses(self, body):
        model = body.get("model", "unknown")
        inp = body.get("input")
        items = inp if isinstance(inp, list) else [{"role": "user", "content": inp or ""}]
        alltext = "\n".join(text_of(i.get("content")) for i in items if isinstance(i, dict))
        last = items[-1] if items else {}
        last_is_output = isinstance(last, dict) and last.get("type", "").endswith("_output")
        tool_names = {}
        for t in body.get("tools") or []:
            tool_names[t.get("name") or t.get("type")] = t
        rid = "resp_" + uuid.uuid4().hex[:24]
        created = int(time.time())
        call = None
        if "TOOLTEST" in alltext and not last_is_output:
            cid = "call_" + uuid.uuid4().hex[:20]
            if "exec_command" in tool_names:
                call = {
                    "type": "function_call",
                    "id": "fc_" + uuid.uuid4().hex[:20],
                    "call_id": cid,
                    "name": "exec_command",
                    "arguments": json.dumps({"cmd": "echo hi"}),
                    "status": "completed",
                }
            elif "shell_command" in tool_names:
                call = {
                    "type": "function_call",
                    "id": "fc_" + uuid.uuid4().hex[:20],
                    "call_id": cid,
                    "name": "shell_command",
                    "arguments": json.dumps({"command": "echo hi"}),
                    "status": "completed",
                }
            elif "shell" in tool_names:
                call = {
                    "type": "function_call",
                    "id": "fc_" + uuid.uuid4().hex[:20],
                    "call_id": cid,
                    "name": "shell",
                    "arguments": json.dumps({"command": ["bash", "-lc", "echo hi"]}),
                    "status": "completed",
                }
        if "PATCHTEST" in alltext and not last_is_output and "apply_patch" in tool_names:
            call = {
                "type": "custom_tool_call",
                "id": "ctc_" + uuid.uuid4().hex[:20],
                "call_id": "call_" + uuid.uuid4().hex[:20],
                "name": "apply_patch",
                "status": "completed",
                "input": "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n",
            }
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 105,
        }
        if call:
            item = call
        else:
            item = {
                "id": "msg_" + uuid.uuid4().hex[:24],
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "hi", "annotations": []}],
            }
        base = {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": "in_progress",
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "model": model,
            "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "store": body.get("store", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "usage": None,
            "metadata": {},
        }
        reasoning = None
        if os.environ.get("REASONING"):
            reasoning = {
                "type": "reasoning",
                "id": "rs_" + uuid.uuid4().hex[:20],
                "summary": [
                    {"type": "summary_text", "text": "**Greeting** The user wants a greeting."}
                ],
                "encrypted_content": "ZW5jcnlwdGVkLXJlYXNvbmluZy10ZXN0",
            }
        final = {
            **base,
            "status": "completed",
            "output": ([reasoning] if reasoning else []) + [item],
            "usage": usage,
        }
        RESPONSES[rid] = final
        if not body.get("stream"):
            return self._json(200, final)
        self._sse_start({"x-request-id": "req_" + rid})
        seq = [0]

        def ev(name, **data):
            d = {"type": name, "sequence_number": seq[0], **data}
            seq[0] += 1
            self._event(name, d)

        if os.environ.get("MINIMAL"):
            ev("response.output_item.done", output_index=0, item=item)
            if os.environ.get("MINIMAL") == "3":
                return self._sse_end()
            ev(
                "response.completed",
                response={"id": rid, "usage": usage}
                if os.environ.get("MINIMAL") == "2"
                else {"id": rid},
            )
            return self._sse_end()
        ev("response.created", response=base)
        ev("response.in_progress", response=base)
        oi = 0
        if reasoning:
            ev(
                "response.output_item.added",
                output_index=0,
                item={**reasoning, "summary": [], "encrypted_content": None},
            )
            ev(
                "response.reasoning_summary_part.added",
                item_id=reasoning["id"],
                output_index=0,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
            ev(
                "response.reasoning_summary_text.delta",
                item_id=reasoning["id"],
                output_index=0,
                summary_index=0,
                delta=reasoning["summary"][0]["text"],
            )
            ev(
                "response.reasoning_summary_text.done",
                item_id=reasoning["id"],
                output_index=0,
                summary_index=0,
                text=reasoning["summary"][0]["text"],
            )
            ev(
                "response.reasoning_summary_part.done",
                item_id=reasoning["id"],
                output_index=0,
                summary_index=0,
                part=reasoning["summary"][0],
            )
            ev("response.output_item.done", output_index=0, item=reasoning)
            oi = 1
        if call and call["type"] == "custom_tool_call":
            ev(
                "response.output_item.added",
                output_index=oi,
                item={**call, "input": "", "status": "in_progress"},
            )
            ev(
                "response.custom_tool_call_input.delta",
                item_id=call["id"],
                output_index=oi,
                delta=call["input"],
            )
            ev(
                "response.custom_tool_call_input.done",
                item_id=call["id"],
                output_index=oi,
                input=call["input"],
            )
            ev("response.output_item.done", output_index=oi, item=call)
        elif call:
            ev(
                "response.output_item.added",
                output_index=oi,
                item={**call, "arguments": "", "status": "in_progress"},
            )
            ev(
                "response.function_call_arguments.delta",
                item_id=call["id"],
                output_index=oi,
                delta=call["arguments"],
            )
            ev(
                "response.function_call_arguments.done",
                item_id=call["id"],
                output_index=oi,
                arguments=call["arguments"],
            )
            ev("response.output_item.done", output_index=oi, item=call)
        else:
            iid = item["id"]
            ev(
                "response.output_item.added",
                output_index=oi,
                item={**item, "status": "in_progress", "content": []},
            )
            ev(
                "response.content_part.added",
                item_id=iid,
                output_index=oi,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
            ev(
                "response.output_text.delta",
                item_id=iid,
                output_index=oi,
                content_index=0,
                delta="hi",
                logprobs=[],
            )
            ev(
                "response.output_text.done",
                item_id=iid,
                output_index=oi,
                content_index=0,
                text="hi",
                logprobs=[],
            )
            ev(
                "response.content_part.done",
                item_id=iid,
                output_index=oi,
                content_index=0,
                part={"type": "output_text", "text": "hi", "annotations": []},
            )
            ev("response.output_item.done", output_index=oi, item=item)
        ev("response.completed", response=final)
        self._sse_end()


if __name__ == "__main__":
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    sys.stderr.write("listening on %d, logging to %s\n" % (PORT, OUTDIR))
    srv.serve_forever()
