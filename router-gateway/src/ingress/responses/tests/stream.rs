//! Streamed answers as Responses events.

use router_sdk::{ChatChunk, ThinkingDelta, ToolCallDelta};

use super::answer::{offered, thought_said_and_called};
use super::*;
use crate::errors::ApiError;

/// The `(event name, data)` of every event `chunks` make, for a request offering `tools`,
/// checking that each is named by its `type` and numbered in order from 0.
fn events(tools: Value, chunks: Vec<ChatChunk>) -> Vec<(&'static str, Value)> {
    let mut writer = Responses::events(at(), true, asked(tools));
    let got: Vec<(&'static str, Value)> = chunks
        .into_iter()
        .flat_map(|c| writer.chunk(c))
        .map(|e| (e.name.unwrap(), serde_json::from_str(&e.data).unwrap()))
        .collect();
    numbered(&got);
    got
}

#[track_caller]
fn numbered(events: &[(&'static str, Value)]) {
    for (n, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], *name, "{data}");
        assert_eq!(data["sequence_number"], n, "{data}");
    }
}

fn names(events: &[(&'static str, Value)]) -> Vec<&'static str> {
    events.iter().map(|(n, _)| *n).collect()
}

fn piece(index: u32, first: Option<(&str, &str)>, arguments: &str) -> ChatChunk {
    ChatChunk::ToolCallDelta(ToolCallDelta {
        index,
        id: first.map(|(id, _)| id.into()),
        name: first.map(|(_, name)| name.into()),
        arguments: arguments.into(),
    })
}

#[test]
fn a_stream_is_the_responses_event_sequence_item_by_item() {
    let got = events(
        offered(),
        vec![
            ChatChunk::Thinking(ThinkingDelta::Text(String::new())),
            ChatChunk::Thinking(ThinkingDelta::Text("Plan.".into())),
            ChatChunk::Thinking(ThinkingDelta::Signature("sig-1".into())),
            ChatChunk::Delta("Spawn".into()),
            ChatChunk::Delta("ing.".into()),
            piece(0, Some(("toolu_1", "multi_agent_v1__spawn_agent")), ""),
            piece(0, None, "{\"message\":"),
            piece(0, None, "\"hi\"}"),
            piece(1, Some(("toolu_2", "exec_command")), "{}"),
            ChatChunk::Thoughts(vec![signed("Plan.")]),
            ChatChunk::ToolCalls(Vec::new()),
            ChatChunk::Done(receipt(FinishReason::ToolCalls)),
        ],
    );
    let (added, done) = ("response.output_item.added", "response.output_item.done");
    let args = "response.function_call_arguments.delta";
    let args_done = "response.function_call_arguments.done";
    let want = [
        "response.created",
        "response.in_progress",
        added,
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        done,
        added,
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        done,
        added,
        args,
        args,
        args_done,
        done,
        added,
        args,
        args_done,
        done,
        "response.completed",
    ];
    assert_eq!(names(&got), want);
    let started = &got[0].1["response"];
    assert_eq!(
        (
            &started["id"],
            &started["status"],
            &started["output"],
            &started["usage"]
        ),
        (
            &json!("resp_r1"),
            &json!("in_progress"),
            &json!([]),
            &Value::Null
        )
    );
    // Each item: added and done at its place, under one id, the deltas naming it.
    for (place, (a, d)) in [(2, 7), (8, 14), (15, 19), (20, 23)]
        .into_iter()
        .enumerate()
    {
        let (a, d) = (&got[a].1, &got[d].1);
        assert_eq!(
            (&a["output_index"], &d["output_index"]),
            (&json!(place), &json!(place))
        );
        assert_eq!(a["item"]["id"], d["item"]["id"]);
    }
    assert_eq!(got[10].1["item_id"], "msg_r1");
    assert_eq!(got[10].1["delta"], "Spawn");
    assert_eq!(got[12].1["text"], "Spawning.");
    assert_eq!(got[15].1["item"]["name"], "spawn_agent");
    assert_eq!(got[18].1["arguments"], "{\"message\":\"hi\"}");
    assert_eq!(got[18].1["name"], "spawn_agent");
    // The thought goes out whole once its signature came.
    let thought = got[7].1["item"]["encrypted_content"].as_str().unwrap();
    assert_eq!(thought::decode(thought), Decoded::Thought(signed("Plan.")));
    // The end: the whole response, its items those the whole answer has, ids included.
    let end = &got[24].1["response"];
    assert_eq!(end["status"], "completed");
    let whole = Responses::answer(&thought_said_and_called(), &at(), &asked(offered()));
    assert_eq!(end["output"], whole["output"]);
    let items: Vec<&Value> = [7, 14, 19, 23].iter().map(|&i| &got[i].1["item"]).collect();
    assert_eq!(end["output"], json!(items));
    assert_eq!(
        end["usage"],
        json!({"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 900, "cache_write_tokens": 0},
               "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 20},
               "total_tokens": 1050})
    );
}

#[test]
fn a_cut_stream_ends_incomplete_and_a_refusal_is_a_message_of_its_own() {
    let got = events(
        json!([]),
        vec![
            ChatChunk::Delta("Once".into()),
            ChatChunk::Done(receipt(FinishReason::Length)),
        ],
    );
    let last = &got[got.len() - 1];
    assert_eq!(last.0, "response.incomplete");
    assert_eq!(last.1["response"]["status"], "incomplete");
    assert_eq!(
        last.1["response"]["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(got[got.len() - 2].1["item"]["status"], "incomplete");
    let refused = Receipt {
        refusal: Some("No.".into()),
        ..receipt(FinishReason::Stop)
    };
    let got = events(json!([]), vec![ChatChunk::Done(refused)]);
    assert_eq!(
        names(&got)[2..],
        [
            "response.output_item.added",
            "response.content_part.added",
            "response.refusal.delta",
            "response.refusal.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(
        got[7].1["item"]["content"],
        json!([{"type": "refusal", "refusal": "No."}])
    );
}

#[test]
fn redacted_thinking_is_a_reasoning_item_of_its_own() {
    let got = events(
        json!([]),
        vec![
            ChatChunk::Thinking(ThinkingDelta::Redacted("opaque".into())),
            ChatChunk::Delta("Done.".into()),
        ],
    );
    assert_eq!(got[2].0, "response.output_item.added");
    assert_eq!(got[3].0, "response.output_item.done");
    let item = &got[3].1["item"];
    assert_eq!(item["summary"], json!([]));
    let Decoded::Thought(t) = thought::decode(item["encrypted_content"].as_str().unwrap()) else {
        panic!("{item}");
    };
    assert_eq!(t.redacted.as_deref(), Some("opaque"));
    assert_eq!(t.origin, Api::Anthropic);
}

#[test]
fn a_broken_stream_ends_with_response_failed_holding_the_items_done() {
    let mut writer = Responses::events(at(), true, asked(json!([])));
    let mut got: Vec<(&'static str, Value)> = Vec::new();
    let chunks = [
        ChatChunk::Thinking(ThinkingDelta::Signature("sig".into())),
        ChatChunk::Delta("Hel".into()),
    ];
    for chunk in chunks {
        got.extend(
            writer
                .chunk(chunk)
                .into_iter()
                .map(|e| (e.name.unwrap(), serde_json::from_str(&e.data).unwrap())),
        );
    }
    let failed = writer.failed(&ApiError::stopping());
    got.extend(
        failed
            .into_iter()
            .map(|e| (e.name.unwrap(), serde_json::from_str(&e.data).unwrap())),
    );
    numbered(&got);
    let (name, data) = got.last().unwrap();
    assert_eq!(*name, "response.failed");
    let response = &data["response"];
    assert_eq!(response["status"], "failed");
    assert_eq!(response["error"]["code"], "server_error");
    assert!(
        response["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway stopped"),
        "{response}"
    );
    // The thought was done; the message was still being written.
    let output = response["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["type"], "reasoning");
    // A stream that breaks before anything came still starts as a response.
    let mut writer = Responses::events(at(), true, asked(json!([])));
    let got: Vec<&str> = writer
        .failed(&ApiError::stopping())
        .iter()
        .map(|e| e.name.unwrap())
        .collect();
    assert_eq!(
        got,
        [
            "response.created",
            "response.in_progress",
            "response.failed"
        ]
    );
}
