"""The token rule, shared by the mock and workload.py: a prompt's blocks and their tokens.

A block's tokens are ceil(chars / 4) of the text it carries: a text block its text; a tool
definition name + description + its input_schema as compact JSON with sorted keys; tool_use id +
name + input (compact, sorted keys); tool_result tool_use_id + its text; thinking blocks 0
(Anthropic strips earlier turns' thinking from the context); an image 1,600. When tools are
given, the first tool also carries `--tool-overhead-tokens` (default 346: the tool-use system
prompt Anthropic documents for Claude 4 models with tool_choice auto).
"""

import json

IMAGE_TOKENS = 1600


def tokens_of(chars):
    """The token rule: ceil(chars / 4)."""
    return (chars + 3) // 4


def canon(obj):
    """Compact JSON with sorted keys: how tool schemas and tool inputs are counted and hashed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def anthropic_blocks(req, tool_overhead):
    """[(key bytes, tokens, breakpoint?)] in Anthropic's cache order, or raise ValueError."""
    return tool_blocks(req, tool_overhead) + system_blocks(req) + message_blocks(req)


def prompt_tokens(req, tool_overhead):
    """The whole prompt of a Messages body in tokens, by the token rule."""
    return sum(n for _, n, _ in anthropic_blocks(req, tool_overhead))


def tool_blocks(req, tool_overhead):
    """The tools' blocks; the first carries the tool-use system prompt's tokens."""
    out = []
    tools = req.get("tools") or []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or "name" not in t:
            raise ValueError(f"tools.{i}: a tool has a name")
        schema = canon(t.get("input_schema") or {})
        desc = t.get("description") or ""
        n = tokens_of(len(t["name"]) + len(desc) + len(schema))
        if i == 0:
            n += tool_overhead
        key = ("T" + canon({"name": t["name"], "description": desc, "input_schema":
                            t.get("input_schema") or {}, "type": t.get("type")})).encode()
        out.append((key, n, "cache_control" in t))
    return out


def system_blocks(req):
    """The system prompt's blocks (a string being one text block)."""
    out = []
    system = req.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    for j, b in enumerate(system or []):
        text = b.get("text", "")
        if not text:
            raise ValueError(f"system.{j}.text: text content blocks must be non-empty")
        out.append((b"S" + text.encode(), tokens_of(len(text)), "cache_control" in b))
    return out


def message_blocks(req):
    """The messages' blocks, each message's first block keyed with its role."""
    out = []
    msgs = req.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("messages: at least one message is required")
    for i, m in enumerate(msgs):
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise ValueError(f"messages.{i}.role: user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not content:
            raise ValueError(f"messages.{i}: content must be non-empty")
        for j, b in enumerate(content):
            lead = (b"\x01" + role.encode()) if j == 0 else b"\x02"
            key, n = content_block(i, j, b)
            out.append((lead + key, n, "cache_control" in b))
    return out


def content_block(i, j, b):
    """(key bytes, tokens) of block `j` of message `i`."""
    kind = b.get("type")
    if kind == "text":
        text = b.get("text", "")
        if not text:
            raise ValueError(f"messages.{i}.content.{j}.text: must be non-empty")
        return b"x" + text.encode(), tokens_of(len(text))
    if kind == "thinking":
        return ("k" + b.get("thinking", "") + "\x00" + (b.get("signature") or "")).encode(), 0
    if kind == "redacted_thinking":
        return ("r" + b.get("data", "")).encode(), 0
    if kind == "tool_use":
        inp = canon(b.get("input") or {})
        key = ("u" + b.get("id", "") + "\x00" + b.get("name", "") + "\x00" + inp).encode()
        return key, tokens_of(len(b.get("id", "")) + len(b.get("name", "")) + len(inp))
    if kind == "tool_result":
        return tool_result_block(b)
    if kind == "image":
        return ("i" + canon(b.get("source"))).encode(), IMAGE_TOKENS
    raise ValueError(f"messages.{i}.content.{j}.type: unknown block {kind!r}")


def tool_result_block(b):
    """(key bytes, tokens) of a tool_result: its id and text, plus its images."""
    c = b.get("content")
    if isinstance(c, list):
        text = "\n".join(x.get("text", "") for x in c if x.get("type") == "text")
        images = sum(1 for x in c if x.get("type") == "image")
    else:
        text, images = c or "", 0
    tid = b.get("tool_use_id", "")
    key = ("R" + tid + "\x00" + text + ("\x00E" if b.get("is_error") else "")).encode()
    return key, tokens_of(len(tid) + len(text)) + images * IMAGE_TOKENS
