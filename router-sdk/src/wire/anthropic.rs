//! Anthropic `/v1/messages`.

use reqwest::header::{HeaderName, HeaderValue};
use router_core::config::Api;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::classify::{self, ErrorBody, FailureClass};
use super::{StreamFailure, malformed, nullable, secret_header};
use crate::secret::ApiKey;
use crate::types::{ChatRequest, Completion, FinishReason, Role, StreamEvent, Usage};

/// The `anthropic-version` header value.
pub(super) const VERSION: &str = "2023-06-01";

/// `max_tokens` is required by Anthropic; used when the request sets none.
pub(super) const DEFAULT_MAX_TOKENS: u64 = 4096;

pub(super) fn url(base: &str) -> String {
    format!("{base}/v1/messages")
}

pub(super) fn auth(key: &ApiKey) -> Option<(HeaderName, HeaderValue)> {
    secret_header("x-api-key", "", key)
}

pub(super) fn body(model: &str, req: &ChatRequest, stream: bool) -> Value {
    let (system, turns): (Vec<_>, Vec<_>) =
        req.messages.iter().partition(|m| m.role == Role::System);
    let messages = turns.iter().map(|m| {
        let role = if m.role == Role::Assistant {
            "assistant"
        } else {
            "user"
        };
        let mut msg = Map::new();
        msg.insert("role".into(), role.into());
        msg.insert("content".into(), m.content.as_str().into());
        Value::Object(msg)
    });
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert(
        "max_tokens".into(),
        req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).into(),
    );
    if !system.is_empty() {
        let joined: Vec<&str> = system.iter().map(|m| m.content.as_str()).collect();
        body.insert("system".into(), joined.join("\n\n").into());
    }
    body.insert("messages".into(), messages.collect());
    if let Some(t) = req.temperature.filter(|t| t.is_finite()) {
        body.insert("temperature".into(), t.into());
    }
    if !req.stop.is_empty() {
        body.insert("stop_sequences".into(), req.stop.clone().into());
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

#[derive(Deserialize)]
struct Response {
    #[serde(default, deserialize_with = "nullable")]
    content: Vec<Block>,
    stop_reason: Option<String>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, deserialize_with = "nullable")]
    text: String,
}

/// Usage in a response or `message_start`, and (every field optional) in `message_delta`.
#[derive(Deserialize, Default, Debug, Clone, Copy)]
struct UsageJson {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl UsageJson {
    /// Replaces the fields `newer` reports (its counts are cumulative).
    fn assign(&mut self, newer: UsageJson) {
        let fields = [
            (&mut self.input_tokens, newer.input_tokens),
            (&mut self.output_tokens, newer.output_tokens),
            (
                &mut self.cache_creation_input_tokens,
                newer.cache_creation_input_tokens,
            ),
            (
                &mut self.cache_read_input_tokens,
                newer.cache_read_input_tokens,
            ),
        ];
        for (field, value) in fields {
            if value.is_some() {
                *field = value;
            }
        }
    }

    /// Prompt = input + cache creation + cache read.
    fn usage(&self) -> Usage {
        let n = |v: Option<u64>| v.unwrap_or(0);
        Usage {
            prompt_tokens: n(self.input_tokens)
                + n(self.cache_creation_input_tokens)
                + n(self.cache_read_input_tokens),
            completion_tokens: n(self.output_tokens),
        }
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

pub(super) fn parse_response(body: &[u8]) -> Result<Completion, serde_json::Error> {
    let response: Response = serde_json::from_slice(body)?;
    let text = response
        .content
        .into_iter()
        .filter(|b| b.kind == "text")
        .map(|b| b.text);
    Ok(Completion {
        content: text.collect(),
        finish_reason: response.stop_reason.as_deref().map(finish_reason),
        usage: response.usage.map(|u| u.usage()),
    })
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockDelta {
        delta: BlockDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        usage: Option<UsageJson>,
    },
    MessageStop,
    Error,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: UsageJson,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// Stream state: usage so far (assigned, never added) and whether `message_stop` was seen.
#[derive(Debug, Default)]
pub(super) struct Stream {
    usage: UsageJson,
    done: bool,
}

impl Stream {
    pub(super) fn event(
        &mut self,
        event_name: &str,
        data: &str,
    ) -> Result<Vec<StreamEvent>, StreamFailure> {
        if self.done {
            return Ok(Vec::new());
        }
        let parsed: Event =
            serde_json::from_str(data).map_err(|e| malformed(Api::Anthropic, data, &e))?;
        if event_name == "error" || matches!(parsed, Event::Error) {
            return Err(classify::stream_failure(Api::Anthropic, data.as_bytes()));
        }
        Ok(match parsed {
            Event::MessageStart { message } => {
                self.usage = message.usage;
                vec![StreamEvent::Usage(self.usage.usage())]
            }
            Event::ContentBlockDelta {
                delta: BlockDelta::TextDelta { text },
            } if !text.is_empty() => {
                vec![StreamEvent::Delta(text)]
            }
            Event::MessageDelta { delta, usage } => {
                let finish = delta
                    .stop_reason
                    .map(|r| StreamEvent::Finish(finish_reason(&r)));
                let usage = usage.map(|u| {
                    self.usage.assign(u);
                    StreamEvent::Usage(self.usage.usage())
                });
                finish.into_iter().chain(usage).collect()
            }
            Event::MessageStop => {
                self.done = true;
                vec![StreamEvent::Done]
            }
            Event::ContentBlockDelta { .. } | Event::Error | Event::Other => Vec::new(),
        })
    }
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorJson,
}

#[derive(Deserialize)]
struct ErrorJson {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
}

/// The HTTP status each documented error type comes with.
fn status_of(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// Billing: the message mentions a spend limit, the credit balance or usage limits (these come
/// as 429 or 400), or the type is `billing_error`.
fn is_billing(error: &ErrorJson) -> bool {
    let message = error.message.to_lowercase();
    let words = [
        "spend limit",
        "spend_limit",
        "credit balance",
        "usage limit",
    ];
    error.kind == "billing_error" || words.iter().any(|w| message.contains(w))
}

pub(super) fn error_body(body: &[u8]) -> Option<ErrorBody> {
    let ErrorEnvelope { error } = serde_json::from_slice(body).ok()?;
    let class = if is_billing(&error) {
        Some(FailureClass::Billing)
    } else if error.kind == "overloaded_error" {
        Some(FailureClass::Overloaded)
    } else {
        None
    };
    Some(ErrorBody {
        status: status_of(&error.kind),
        code: (!error.kind.is_empty()).then(|| error.kind.clone()),
        message: error.message,
        class,
        retry_delay: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wire::test_support::{decode_all, request};
    use serde_json::json;

    #[test]
    fn body_lifts_system_and_requires_max_tokens() {
        let want = json!({
            "model": "claude-sonnet-4-20250514",
            "max_tokens": 64,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Bye"},
            ],
            "temperature": 0.5,
            "stop_sequences": ["END"],
            "stream": true,
        });
        assert_eq!(body("claude-sonnet-4-20250514", &request(), true), want);
        let mut two_systems = ChatRequest::new("Hi");
        two_systems
            .messages
            .insert(0, crate::types::Message::system("A."));
        two_systems
            .messages
            .insert(1, crate::types::Message::system("B."));
        let plain = body("m", &two_systems, false);
        let want = json!({"model": "m", "max_tokens": DEFAULT_MAX_TOKENS, "system": "A.\n\nB.",
            "messages": [{"role": "user", "content": "Hi"}]});
        assert_eq!(plain, want);
    }

    #[test]
    fn response_usage_counts_cache_as_prompt() {
        let body = include_bytes!("../../tests/fixtures/anthropic/ok.json");
        let got = parse_response(body).unwrap();
        assert_eq!(got.content, "Hi! My name is Claude.");
        assert_eq!(got.finish_reason, Some(FinishReason::Stop));
        let prompt = 21 + 188 + 1800;
        assert_eq!(
            got.usage,
            Some(Usage {
                prompt_tokens: prompt,
                completion_tokens: 393
            })
        );
    }

    #[test]
    fn finish_reasons() {
        for (name, want) in [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("refusal", FinishReason::ContentFilter),
            ("tool_use", FinishReason::Other("tool_use".into())),
        ] {
            assert_eq!(finish_reason(name), want);
        }
    }

    #[test]
    fn stream_usage_is_assigned_not_added() {
        let sse = include_str!("../../tests/fixtures/anthropic/stream.sse");
        let (events, failure) = decode_all(Api::Anthropic, sse);
        assert_eq!(failure, None);
        assert_eq!(
            events,
            [
                StreamEvent::Usage(Usage {
                    prompt_tokens: 135,
                    completion_tokens: 1
                }),
                StreamEvent::Ignore,
                StreamEvent::Ignore,
                StreamEvent::Delta("Hello".into()),
                StreamEvent::Delta("!".into()),
                StreamEvent::Ignore,
                StreamEvent::Finish(FinishReason::Stop),
                StreamEvent::Usage(Usage {
                    prompt_tokens: 135,
                    completion_tokens: 15
                }),
                StreamEvent::Done,
            ]
        );
    }

    #[test]
    fn message_delta_input_counts_replace_the_start_counts() {
        let mut s = Stream::default();
        let start =
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#;
        s.event("message_start", start).unwrap();
        let delta =
            r#"{"type":"message_delta","delta":{},"usage":{"input_tokens":12,"output_tokens":7}}"#;
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 7,
        };
        assert_eq!(
            s.event("message_delta", delta).unwrap(),
            [StreamEvent::Usage(usage)]
        );
        let again = r#"{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}"#;
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 9,
        };
        assert_eq!(
            s.event("message_delta", again).unwrap(),
            [StreamEvent::Usage(usage)]
        );
    }

    #[test]
    fn overloaded_error_event_after_200() {
        let sse = include_str!("../../tests/fixtures/anthropic/stream_error_529.sse");
        let (events, failure) = decode_all(Api::Anthropic, sse);
        let usage = Usage {
            prompt_tokens: 12,
            completion_tokens: 1,
        };
        let want = [
            StreamEvent::Usage(usage),
            StreamEvent::Ignore,
            StreamEvent::Delta("Par".into()),
        ];
        assert_eq!(events, want);
        let failure = failure.unwrap();
        assert_eq!(failure.class, FailureClass::Overloaded);
        assert_eq!(
            (failure.status, failure.code.as_deref()),
            (None, Some("overloaded_error"))
        );
        assert_eq!(
            failure.class.kind(),
            router_core::retry::FailureKind::Overloaded
        );
    }
}
