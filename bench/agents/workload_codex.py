"""The Codex session: POST /v1/responses as Codex sends it, turn after turn.

`stream: true`, `store: false`, `instructions`, a developer message of ~17 KB input_text, an
environment_context user message and the prompt, function tools; tool round trips as
function_call + function_call_output items, text answers followed by a new user message. No
max_output_tokens (Codex sends none).
"""

import json

from workload_session import Session
from workload_text import log_uniform, text


class Codex(Session):
    """A Codex session: its instructions, tools and input items so far."""

    path = "/v1/responses"

    def __init__(self, args, slot, index, shared):
        super().__init__(args, slot, index)
        rng = self.rng
        self.items = [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": shared["codex_developer"]}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<environment_context>\n  <cwd>/home/dev/p-"
                 f"{slot}-{index}</cwd>\n  <approval_policy>on-request</approval_policy>\n  "
                 "<sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted"
                 "</network_access>\n  <shell>bash</shell>\n</environment_context>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": text(rng, rng.randint(*args.prompt_chars))}]},
        ]
        self.head = json.dumps({
            "model": args.responses_model, "instructions": shared["codex_instructions"],
            "tools": shared["codex_tools"], "tool_choice": "auto", "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
            "stream": True, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": f"{args.seed}-{slot}-{index}",
        })[:-1].encode()

    def body(self):
        return self.head + b', "input": ' + json.dumps(self.items).encode() + b"}"

    def expected_prompt(self):
        return None

    def headers(self):
        return {"authorization": "Bearer bench", "originator": "codex_cli_rs",
                "openai-beta": "responses=experimental"}

    def collector(self):
        st = {"items": [], "stop": None, "usage": {}, "error": None}

        def on_event(name, data):
            ev = json.loads(data)
            t = ev.get("type", name)
            if t == "response.output_item.done":
                st["items"].append(ev["item"])
            elif t in ("response.completed", "response.incomplete"):
                st["usage"] = (ev.get("response") or {}).get("usage") or {}
                st["stop"] = t
            elif t in ("response.failed", "error"):
                st["error"] = ev.get("response", ev)
        return st, on_event

    def advance(self, st):
        rng = self.rng
        calls = []
        for item in st["items"]:
            kind = item.get("type")
            if kind == "function_call":
                self.items.append({"type": "function_call", "name": item["name"],
                                   "arguments": item["arguments"], "call_id": item["call_id"]})
                calls.append(item)
            elif kind == "message":
                self.items.append({"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": "".join(
                        p.get("text", "") for p in item.get("content") or [])}]})
            elif kind == "reasoning":
                self.items.append(item)
        for c in calls:
            self.items.append({"type": "function_call_output", "call_id": c["call_id"],
                               "output": text(rng, log_uniform(rng, *self.args.result_chars))})
        if not calls:
            self.items.append({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": text(rng, rng.randint(*self.args.prompt_chars))}]})
        return True
