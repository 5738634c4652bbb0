"""The scenarios: how many sessions of which shape, under which upstream limits."""

# Anthropic's published Tier 4 limits for Claude Sonnet 4.x, and four times them.
TIER4 = {"rpm": 4000, "itpm": 2_000_000, "otpm": 400_000}
TIER4X4 = {"rpm": 16000, "itpm": 8_000_000, "otpm": 1_600_000}
# The OpenAI-compatible upstream of the Responses runs (per minute).
OPENAI = {"chat_rpm": 15000, "tpm": 40_000_000}
CHAT_OUTPUT_CAP = 16384

SCENARIOS = {
    "msg-k4": {"kind": "messages", "k": 4, "limits": TIER4,
               "what": "Claude Code K=4, Tier 4 (ITPM 2M, OTPM 400k)"},
    "msg-k16": {"kind": "messages", "k": 16, "limits": TIER4X4,
                "what": "Claude Code K=16, 4x Tier 4 (ITPM 8M, OTPM 1.6M)"},
    "msg-k16-tight": {"kind": "messages", "k": 16, "limits": TIER4,
                      "what": "Claude Code K=16, Tier 4: OTPM binds (16 x 32000 in flight > 400k)",
                      "watch": True},
    "resp-k4": {"kind": "responses", "k": 4, "limits": OPENAI,
                "what": "Codex K=4, TPM 40M (prompt + 16384 at arrival)"},
}
QUICK = ["msg-k4", "resp-k4"]
FULL = ["msg-k4", "msg-k16", "msg-k16-tight", "resp-k4"]


def anthropic_limits(scenario):
    """The Anthropic deployment's limits: the scenario's, or Tier 4 in a Responses run."""
    return scenario["limits"] if scenario["kind"] == "messages" else TIER4


def openai_limits(scenario):
    """The OpenAI deployment's limits: the scenario's, or OPENAI in a Messages run."""
    return scenario["limits"] if scenario["kind"] == "responses" else OPENAI
