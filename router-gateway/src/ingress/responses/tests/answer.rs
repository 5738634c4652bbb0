//! Whole answers as `response` objects.

use router_sdk::{ChatResponse, ToolCall};

use super::*;

/// Tools of a namespace and one alone, as a request offers them.
pub(super) fn offered() -> Value {
    json!([
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
         "tools": [{"type": "function", "name": "spawn_agent"}]},
        {"type": "web_search"}
    ])
}

/// An answer that thought, said something and called a namespaced function and another.
pub(super) fn thought_said_and_called() -> ChatResponse {
    let call = |id: &str, name: &str, arguments: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    };
    ChatResponse {
        content: "Spawning.".into(),
        tool_calls: vec![
            call(
                "toolu_1",
                "multi_agent_v1__spawn_agent",
                "{\"message\":\"hi\"}",
            ),
            call("toolu_2", "exec_command", "{}"),
        ],
        thinking: vec![signed("Plan.")],
        receipt: receipt(FinishReason::ToolCalls),
    }
}

#[test]
fn a_whole_answer_is_a_response_object() {
    let asked = asked(offered());
    let got = Responses::answer(&thought_said_and_called(), &at(), &asked);
    let want = json!({
        "id": "resp_r1", "object": "response", "created_at": 1_700_000_000,
        "status": "completed", "error": null, "incomplete_details": null,
        "model": "claude-sonnet-4-5",
        "output": [
            {"type": "reasoning", "id": "rs_r1_0",
             "summary": [{"type": "summary_text", "text": "Plan."}],
             "encrypted_content": thought::encode(&signed("Plan."))},
            {"type": "message", "id": "msg_r1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Spawning.", "annotations": []}]},
            {"type": "function_call", "id": "fc_r1_0", "call_id": "toolu_1",
             "name": "spawn_agent", "namespace": "multi_agent_v1",
             "arguments": "{\"message\":\"hi\"}", "status": "completed"},
            {"type": "function_call", "id": "fc_r1_1", "call_id": "toolu_2",
             "name": "exec_command", "arguments": "{}", "status": "completed"}
        ],
        // What the request offered that the model could use, as the caller wrote it.
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents",
             "tools": [{"type": "function", "name": "spawn_agent"}]}
        ],
        "usage": {
            "input_tokens": 1000, "input_tokens_details": {"cached_tokens": 900, "cache_write_tokens": 0},
            "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 20},
            "total_tokens": 1050
        }
    });
    assert_eq!(got, want);
}

#[test]
fn a_cut_answer_is_incomplete_and_a_refusal_is_its_own_part() {
    let asked = asked(json!([]));
    let cut = ChatResponse {
        content: "Once upon".into(),
        tool_calls: Vec::new(),
        thinking: Vec::new(),
        receipt: receipt(FinishReason::Length),
    };
    let got = Responses::answer(&cut, &at(), &asked);
    assert_eq!(got["status"], "incomplete");
    assert_eq!(
        got["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(got["output"][0]["status"], "incomplete");
    let refused = ChatResponse {
        content: String::new(),
        receipt: Receipt {
            refusal: Some("I can't help with that.".into()),
            ..receipt(FinishReason::Stop)
        },
        ..cut
    };
    let got = Responses::answer(&refused, &at(), &asked);
    assert_eq!(got["status"], "completed");
    assert_eq!(
        got["output"][0]["content"],
        json!([{"type": "refusal", "refusal": "I can't help with that."}])
    );
    assert_eq!(got["tools"], json!([]));
}
