"""The Claude Code session: POST /v1/messages as Claude Code sends it, turn after turn.

`stream: true`, `max_tokens` 32000, `thinking` enabled (budget 16000), 12 tools, a system prompt
of two cached text blocks (a short one and an ~80,000-character one whose last part is per
session: environment, CLAUDE.md), the first user message a <system-reminder> block and the
prompt. Each turn appends the assistant's answer as it streamed (thinking with its signature,
then text or tool_use) and a user message: a tool_result for a tool_use (size log-uniform over
--result-chars), else a new prompt; `cache_control` sits on the system blocks and the last
block of the last message. A session ends after --session-turns turns and the next one begins
(another per-session part, so its first turn writes its prompt to the cache again).
"""

import json

from mock_tokens import prompt_tokens  # the token rule, shared with the mock
from workload_session import Session
from workload_text import log_uniform, text


class ClaudeCode(Session):
    """A Claude Code session: its system prompt, tools and conversation so far."""

    path = "/v1/messages"

    def __init__(self, args, slot, index, shared):
        super().__init__(args, slot, index)
        rng = self.rng
        env = (f"<env>\nWorking directory: /home/dev/project-{slot}-{index}\nIs directory a git "
               f"repo: Yes\nPlatform: linux\nToday's date: 2026-12-05\n</env>\n"
               f"gitStatus: {text(rng, 1500)}\n<claudeMd>\n{text(rng, args.session_chars)}\n"
               "</claudeMd>")
        self.system = [
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": shared["claude_system"] + "\n" + env,
             "cache_control": {"type": "ephemeral"}},
        ]
        self.user_id = f"user_{'%064x' % rng.getrandbits(256)}_account__session_{slot}-{index}"
        self.messages = []     # unmarked
        self.head = json.dumps({
            "model": args.model, "max_tokens": args.max_tokens,
            "thinking": {"type": "enabled", "budget_tokens": args.thinking_budget},
            "metadata": {"user_id": self.user_id}, "stream": True,
            "system": self.system, "tools": shared["claude_tools"],
        })[:-1].encode()       # without the closing brace: messages follow
        self.msg_json = []
        self.msg_tokens = 0
        self.fixed_tokens = prompt_tokens(
            {"system": self.system, "tools": shared["claude_tools"],
             "messages": [{"role": "user", "content": "x"}]}, args.tool_overhead_tokens) - 1
        self.add({"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, "
                                     "you can use the following context:\n"
                                     + text(rng, rng.randint(300, 2500)) + "\n</system-reminder>"},
            {"type": "text", "text": text(rng, rng.randint(*args.prompt_chars))}]})

    def add(self, message):
        self.messages.append(message)
        self.msg_json.append(json.dumps(message).encode())
        self.msg_tokens += prompt_tokens({"messages": [message]}, 0)

    def body(self):
        last = self.messages[-1]
        blocks = [dict(b) for b in last["content"]]
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
        marked = json.dumps({"role": last["role"], "content": blocks}).encode()
        return (self.head + b', "messages": [' + b", ".join(self.msg_json[:-1] + [marked])
                + b"]}")

    def expected_prompt(self):
        """The prompt's tokens by the token rule, as the mock counts this very body (kept
        message by message, so it costs nothing per turn)."""
        return self.fixed_tokens + self.msg_tokens

    def headers(self):
        return {"x-api-key": "bench", "anthropic-version": "2023-06-01",
                "anthropic-beta": "interleaved-thinking-2025-05-14"}

    def collector(self):
        st = {"blocks": {}, "partial": {}, "stop": None, "usage": {}, "error": None}

        def on_event(name, data):
            ev = json.loads(data)
            t = ev.get("type", name)
            if t == "message_start":
                st["usage"].update(ev["message"].get("usage") or {})
            elif t == "content_block_start":
                st["blocks"][ev["index"]] = dict(ev["content_block"])
                st["partial"][ev["index"]] = []
            elif t == "content_block_delta":
                apply_delta(st, ev)
            elif t == "content_block_stop":
                b = st["blocks"][ev["index"]]
                if b.get("type") == "tool_use":
                    raw = "".join(st["partial"][ev["index"]])
                    b["input"] = json.loads(raw) if raw else (b.get("input") or {})
            elif t == "message_delta":
                st["stop"] = ev["delta"].get("stop_reason")
                st["usage"].update(ev.get("usage") or {})
            elif t == "error":
                st["error"] = ev.get("error")
        return st, on_event

    def advance(self, st):
        """Appends the answer and the next user message; False when the session is over."""
        blocks = [st["blocks"][i] for i in sorted(st["blocks"])]
        blocks = [b for b in blocks if not (b.get("type") == "text" and not b.get("text"))]
        self.add({"role": "assistant", "content": blocks})
        rng = self.rng
        calls = [b for b in blocks if b.get("type") == "tool_use"]
        if calls:
            self.add({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c["id"],
                 "content": text(rng, log_uniform(rng, *self.args.result_chars))}
                for c in calls]})
        else:
            self.add({"role": "user", "content": [
                {"type": "text", "text": text(rng, rng.randint(*self.args.prompt_chars))}]})
        return True


def apply_delta(st, ev):
    """A content_block_delta: appended to its block (a tool's input JSON kept in pieces)."""
    d, b = ev["delta"], st["blocks"][ev["index"]]
    k = d.get("type")
    if k == "text_delta":
        b["text"] = b.get("text", "") + d["text"]
    elif k == "thinking_delta":
        b["thinking"] = b.get("thinking", "") + d["thinking"]
    elif k == "signature_delta":
        b["signature"] = b.get("signature", "") + d["signature"]
    elif k == "input_json_delta":
        st["partial"][ev["index"]].append(d["partial_json"])
