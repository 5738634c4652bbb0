"""What the two session shapes share: the bookkeeping base class and the shared content."""

import random

from workload_text import schema, text

CLAUDE_TOOLS = [
    ("Task", ["description", "prompt", "subagent_type"], 4200),
    ("Bash", ["command", "description", "timeout"], 5600),
    ("Glob", ["pattern", "path"], 700),
    ("Grep", ["pattern", "path", "glob", "output_mode", "-n", "-i", "head_limit"], 2400),
    ("ExitPlanMode", ["plan"], 900),
    ("Read", ["file_path", "offset", "limit"], 1700),
    ("Edit", ["file_path", "old_string", "new_string", "replace_all"], 1400),
    ("MultiEdit", ["file_path", "edits"], 2500),
    ("Write", ["file_path", "content"], 900),
    ("NotebookEdit", ["notebook_path", "cell_id", "new_source", "cell_type", "edit_mode"], 800),
    ("WebFetch", ["url", "prompt"], 1300),
    ("TodoWrite", ["todos"], 6500),
]
CODEX_TOOLS = [
    ("shell", ["command", "workdir", "timeout_ms"], 900),
    ("apply_patch", ["input"], 2600),
    ("update_plan", ["explanation", "plan"], 700),
    ("view_image", ["path"], 200),
    ("list_mcp_resources", ["server", "cursor"], 500),
    ("read_mcp_resource", ["server", "uri"], 400),
]


class Session:
    """Common bookkeeping: the slot, the session's rng and its turn counter."""

    def __init__(self, args, slot, index):
        self.args, self.slot, self.index = args, slot, index
        self.rng = random.Random(f"{args.seed}/{slot}/{index}")
        self.turn = 0


def shared_content(args):
    """What every session shares: the system prompt, the tools, Codex's prompts."""
    rng = random.Random(f"{args.seed}/shared")
    claude_tools = [{"name": n, "description": text(rng, size * 2 // 5),
                     "input_schema": schema(rng, props)}
                    for n, props, size in CLAUDE_TOOLS]
    codex_tools = [{"type": "function", "name": n, "description": text(rng, size),
                    "strict": False, "parameters": schema(rng, props)}
                   for n, props, size in CODEX_TOOLS]
    return {
        "claude_system": text(rng, args.system_chars - args.session_chars - 1700),
        "claude_tools": claude_tools,
        "codex_instructions": text(rng, args.instructions_chars),
        "codex_developer": text(rng, args.developer_chars),
        "codex_tools": codex_tools,
    }
