//! Neutral, provider-independent chat types. Wire adapters translate these to and from each
//! provider's JSON; nothing here knows about any provider's format.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::thinking::{ThinkingDelta, Thought};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The caller.
    User,
    /// The model (its text, its tool calls, or both).
    Assistant,
    /// The result of one tool call, answering the call named by
    /// [`Message::tool_call_id`].
    Tool,
}

impl Role {
    /// Its name as OpenAI's chat API and the GenAI conventions write it: `system`, `user`,
    /// `assistant`, `tool`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// An image in a message: at a URL, or inline.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Image {
    /// An `https:` URL the provider fetches (Gemini: a `fileData` URI).
    Url {
        /// The URL.
        url: String,
    },
    /// Base64-encoded bytes.
    Base64 {
        /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
        media_type: String,
        /// The bytes, base64 (standard alphabet, padded).
        data: String,
    },
}

impl std::fmt::Debug for Image {
    /// The URL, or the media type and size of inline data (never megabytes of base64).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Image::Url { url } => f.debug_struct("Url").field("url", url).finish(),
            Image::Base64 { media_type, data } => f
                .debug_struct("Base64")
                .field("media_type", media_type)
                .field("base64_len", &data.len())
                .finish(),
        }
    }
}

/// One piece of a message's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (needs the `vision` capability).
    Image {
        /// Where the image is.
        image: Image,
        /// How closely the model looks at it, where the provider takes that (OpenAI's
        /// `detail`); none: the provider's default.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<ImageDetail>,
    },
}

/// How closely a model looks at an image (OpenAI's `detail`: `low` costs a fixed 85 tokens).
/// Anthropic and Gemini take no such setting; admission reserves for the largest image either
/// way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    /// The provider decides.
    Auto,
    /// A low-resolution look.
    Low,
    /// A high-resolution look.
    High,
}

impl ImageDetail {
    /// `auto`, `low` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Auto => "auto",
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
        }
    }
}

/// A tool the model may call: a function with JSON Schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The function's name (`^[a-zA-Z0-9_-]{1,64}$` on every provider).
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its parameters: a JSON Schema object.
    pub parameters: serde_json::Value,
    /// Ask the provider to hold the arguments to the schema exactly (OpenAI `strict`; ignored
    /// where the provider has no such switch).
    #[serde(default)]
    pub strict: bool,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool call.
    None,
    /// At least one tool call.
    Required,
    /// A call to this function.
    Function(String),
}

/// A call the model made to a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call; a [`Role::Tool`] message answers it by this id.
    pub id: String,
    /// The function called.
    pub name: String,
    /// The arguments as JSON text, exactly as the model wrote them (check before use: a model
    /// may write invalid JSON).
    pub arguments: String,
}

/// A piece of a streamed tool call. The first piece of call `index` carries its id and name;
/// the `arguments` of all its pieces, joined in order, are the call's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    /// Which call of the answer (0, 1, ...), in the order the model made them.
    pub index: u32,
    /// The call's id, on its first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The function's name, on its first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More argument text.
    pub arguments: String,
}

/// The shape the answer must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text (the default).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON matching a schema (needs the `json_schema` capability).
    JsonSchema {
        /// A name for the schema (`^[a-zA-Z0-9_-]{1,64}$`).
        name: String,
        /// The JSON Schema.
        schema: serde_json::Value,
        /// Ask the provider to hold the answer to the schema exactly, where it can.
        #[serde(default)]
        strict: bool,
    },
}

/// How hard a reasoning model thinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    /// No thinking (OpenAI's `none`, which its newer reasoning models take; Anthropic: no
    /// `thinking`; Gemini: a budget of 0, which turns thinking off where a model allows it).
    None,
    /// The least thinking a model allows (OpenAI's `minimal`; Anthropic and Gemini: a 512-token
    /// budget, which Anthropic raises to its least, 1,024).
    Minimal,
    /// Little thinking (Anthropic and Gemini: a 1,024-token budget).
    Low,
    /// Some (4,096 tokens).
    Medium,
    /// Much (16,384 tokens).
    High,
    /// The most (OpenAI's `xhigh`; 24,576 tokens, the most Gemini 2.5 Flash takes).
    Xhigh,
}

impl Effort {
    /// The thinking budget that stands for this effort on providers that take a budget.
    pub fn budget_tokens(self) -> u64 {
        match self {
            Effort::None => 0,
            Effort::Minimal => 512,
            Effort::Low => 1024,
            Effort::Medium => 4096,
            Effort::High => 16_384,
            Effort::Xhigh => 24_576,
        }
    }

    /// `none`, `minimal`, `low`, `medium`, `high` or `xhigh`, as OpenAI's `reasoning_effort`
    /// takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::None => "none",
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
        }
    }

    /// The effort a budget stands for on providers that take an effort: the smallest of
    /// `low`, `medium` and `high` (the three every reasoning model takes) whose budget covers
    /// it.
    pub fn of_budget(tokens: u64) -> Self {
        [Effort::Low, Effort::Medium]
            .into_iter()
            .find(|e| tokens <= e.budget_tokens())
            .unwrap_or(Effort::High)
    }
}

/// Reasoning controls (need the `reasoning` capability): an effort, a token budget, or both.
/// OpenAI-compatible servers get `reasoning_effort` (the effort, else the one the budget stands
/// for); Anthropic gets `thinking` and Gemini `thinkingConfig` with the budget (else the one the
/// effort stands for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reasoning {
    /// How hard to think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    /// The most tokens to think with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
}

impl Reasoning {
    /// The effort to send to providers that take one.
    pub fn effort(&self) -> Effort {
        self.effort
            .unwrap_or_else(|| Effort::of_budget(self.budget_tokens.unwrap_or(0)))
    }

    /// Whether it asks for no thinking at all (effort `none`).
    pub fn is_off(&self) -> bool {
        self.effort == Some(Effort::None)
    }

    /// The budget to send to providers that take one: 0 for effort `none`, whatever budget
    /// is set with it.
    pub fn budget(&self) -> u64 {
        if self.is_off() {
            return 0;
        }
        self.budget_tokens
            .unwrap_or_else(|| self.effort.unwrap_or(Effort::Medium).budget_tokens())
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content: text and images. Read from JSON as a list of parts, or as one string
    /// (one text part).
    #[serde(default, deserialize_with = "text_or_parts")]
    pub content: Vec<Part>,
    /// The tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The thinking of an assistant message, as its provider wrote it: sent back only to that
    /// provider's wire format (see [`Thought`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking: Vec<Thought>,
    /// The call a [`Role::Tool`] message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The prompt up to the end of this message is worth caching: Anthropic gets a
    /// `cache_control` breakpoint there (at most four per request: the last ones). Providers that
    /// cache on their own ignore it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache: bool,
}

/// A message's content from JSON: a string is one text part, `null` none.
fn text_or_parts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Part>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<Part>),
    }
    Ok(match Option::<Content>::deserialize(d)? {
        None => Vec::new(),
        Some(Content::Text(text)) => vec![Part::Text { text }],
        Some(Content::Parts(parts)) => parts,
    })
}

impl Message {
    /// A message of `role` with one text part.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![Part::Text {
                text: content.into(),
            }],
            tool_calls: Vec::new(),
            tool_call_id: None,
            thinking: Vec::new(),
            cache: false,
        }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }
    /// The assistant's turn that made `calls` (and said `text`, if not empty): send it back
    /// with the results.
    pub fn assistant_calls(text: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        let text: String = text.into();
        Self {
            role: Role::Assistant,
            content: if text.is_empty() {
                Vec::new()
            } else {
                vec![Part::Text { text }]
            },
            tool_calls: calls,
            tool_call_id: None,
            thinking: Vec::new(),
            cache: false,
        }
    }
    /// The result of tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(call_id.into()),
            ..Self::text(Role::Tool, content)
        }
    }
    /// Adds an image after the content so far.
    #[must_use]
    pub fn with_image(mut self, image: Image) -> Self {
        self.content.push(Part::Image {
            image,
            detail: None,
        });
        self
    }
    /// The text parts, joined.
    pub fn text_content(&self) -> String {
        self.texts().collect()
    }
    /// The text parts, in order.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|p| match p {
            Part::Text { text } => Some(text.as_str()),
            Part::Image { .. } => None,
        })
    }
    /// The images, in order.
    pub fn images(&self) -> impl Iterator<Item = &Image> {
        self.content.iter().filter_map(|p| match p {
            Part::Image { image, .. } => Some(image),
            Part::Text { .. } => None,
        })
    }
}

pub use router_core::flow::Priority;

/// A chat request, independent of provider. Its `Debug` shows the extra headers' names and
/// `extra_body`'s keys, never their values (a header may carry a credential for a proxy).
///
/// Fields a wire format has no place for are left out of that format's body, as the table of
/// `docs/chat-api.md` says (e.g. `seed` and the penalties for Anthropic); features that change
/// the answer (tools, images, JSON schema, reasoning) instead need a capability, and a request
/// goes only to models that have it.
#[derive(Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// Model name or alias; `None` uses `defaults.model` from the configuration.
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Upper bound on completion tokens.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Seed for sampling (OpenAI-compatible and Gemini).
    pub seed: Option<i64>,
    /// Presence penalty (OpenAI-compatible and Gemini).
    pub presence_penalty: Option<f64>,
    /// Frequency penalty (OpenAI-compatible and Gemini).
    pub frequency_penalty: Option<f64>,
    /// Tools the model may call (needs the `tools` capability).
    pub tools: Vec<Tool>,
    /// Whether and which tool to call; `None`: the provider's default (auto when tools are given).
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may make several calls in one turn (`None`: the provider's default).
    pub parallel_tool_calls: Option<bool>,
    /// The shape of the answer.
    pub response_format: Option<ResponseFormat>,
    /// Reasoning controls.
    pub reasoning: Option<Reasoning>,
    /// The end user, for the provider's abuse monitoring (OpenAI `user`, Anthropic
    /// `metadata.user_id`).
    pub user: Option<String>,
    /// Key-value tags (OpenAI-compatible `metadata`; kept in traces).
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The caller's id for this request, in traces and the receipt; one is drawn when `None`.
    pub request_id: Option<String>,
    /// Fields merged into the top level of the provider's JSON body as given, after
    /// llmroute's own (they win): server options such as vLLM's `top_k` or DeepSeek's. Fields
    /// that decide the model, the prompt, the output cap or streaming (`messages`,
    /// `max_tokens`, `contents`, `generationConfig`, `stream`, ...) are refused: admission
    /// reserved for what llmroute writes there.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Only these providers (by their `name` in the configuration) may serve the request;
    /// empty: any.
    pub providers: Vec<String>,
    /// The tenant this request is accounted to.
    pub tenant: Option<String>,
    /// An identifier of the API key the request came with, kept in its usage record (the
    /// gateway sets the first 12 hex digits of the key's SHA-256). Never the key itself.
    pub key_id: Option<String>,
    /// The API key's own limits and budgets ([`TenantSpec::of_key`]), checked with the
    /// tenant's in the same atomic admission: the gateway sets them for a runtime key that has
    /// limits of its own.
    ///
    /// [`TenantSpec::of_key`]: router_core::ledger::TenantSpec::of_key
    pub key_account: Option<router_core::ledger::TenantSpec>,
    /// How long the whole request (waits, retries, the call) may take.
    pub deadline: Option<Duration>,
    /// How urgent it is.
    pub priority: Priority,
    /// Extra HTTP headers sent to the provider with every attempt of this request: tracing
    /// ids, provider features (e.g. `anthropic-beta`). Headers that carry the key or frame the
    /// body (`authorization`, `x-api-key`, `x-goog-api-key`, `content-type`, `content-length`,
    /// `host`, `transfer-encoding`) are refused with [`Error::InvalidRequest`](crate::Error).
    pub headers: Vec<(String, String)>,
    /// The request's place in a distributed trace: each provider call then sends a
    /// `traceparent` naming its own span, a child of `trace.parent_id`, and the receipt's
    /// attempts carry those span ids.
    pub trace: Option<crate::trace::TraceParent>,
}

impl std::fmt::Debug for ChatRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        let extra: Vec<&str> = self.extra_body.keys().map(String::as_str).collect();
        f.debug_struct("ChatRequest")
            .field("model", &self.model)
            .field("messages", &self.messages)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("top_p", &self.top_p)
            .field("stop", &self.stop)
            .field("seed", &self.seed)
            .field("presence_penalty", &self.presence_penalty)
            .field("frequency_penalty", &self.frequency_penalty)
            .field("tools", &self.tools)
            .field("tool_choice", &self.tool_choice)
            .field("parallel_tool_calls", &self.parallel_tool_calls)
            .field("response_format", &self.response_format)
            .field("reasoning", &self.reasoning)
            .field("user", &self.user)
            .field("metadata", &self.metadata)
            .field("request_id", &self.request_id)
            .field("extra_body (values hidden)", &extra)
            .field("providers", &self.providers)
            .field("tenant", &self.tenant)
            .field("key_id", &self.key_id)
            .field("key_account", &self.key_account)
            .field("deadline", &self.deadline)
            .field("priority", &self.priority)
            .field("headers (values hidden)", &headers)
            .field("trace", &self.trace)
            .finish()
    }
}

impl ChatRequest {
    /// A request of one user message to the default model.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            messages: vec![Message::user(prompt)],
            ..Self::default()
        }
    }

    /// The prompt's size as the router estimates it: the characters of every text part, tool
    /// call, tool definition (parameters as JSON) and response schema, and its images (each
    /// counted as [`IMAGE_TOKENS`](router_core::estimate::IMAGE_TOKENS)).
    pub fn prompt_size(&self) -> router_core::estimate::PromptSize {
        crate::request::prompt_size(self)
    }

    /// The hashes of the prompt's prefixes, by which admission finds what a provider holds in
    /// its prompt cache: `None` when no message is marked [`Message::cache`].
    pub fn prefix_hashes(&self) -> Option<router_core::prompt_cache::PrefixHashes> {
        crate::request::prefix_hashes(self)
    }

    /// What the request needs of a model, beyond text.
    pub fn features(&self) -> Features {
        let calls = self
            .messages
            .iter()
            .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty());
        Features {
            tools: !self.tools.is_empty() || calls,
            images: self.messages.iter().any(|m| m.images().next().is_some()),
            json_schema: matches!(
                self.response_format,
                Some(ResponseFormat::JsonSchema { .. })
            ),
            reasoning: self.reasoning.is_some(),
        }
    }
}

pub use router_core::config::Features;

mod answer;

pub use answer::*;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn message_content_reads_a_string_or_parts() {
        let text: Message = serde_json::from_str(r#"{"role": "user", "content": "Hi"}"#).unwrap();
        assert_eq!(text, Message::user("Hi"));
        let parts: Message = serde_json::from_str(
            r#"{"role": "user", "content": [{"type": "text", "text": "Hi"},
                {"type": "image", "image": {"type": "url", "url": "https://x.test/a.png"}}]}"#,
        )
        .unwrap();
        assert_eq!(parts.texts().collect::<Vec<_>>(), ["Hi"]);
        assert_eq!(parts.images().count(), 1);
        let none: Message =
            serde_json::from_str(r#"{"role": "assistant", "content": null}"#).unwrap();
        assert!(none.content.is_empty());
        let round = serde_json::to_string(&parts).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&round).unwrap(), parts);
    }

    #[test]
    fn tool_call_pieces_assemble_per_index_in_order() {
        let piece = |index, id: Option<&str>, name: Option<&str>, arguments: &str| ToolCallDelta {
            index,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: arguments.into(),
        };
        let mut assembly = ToolCallAssembly::default();
        for d in [
            piece(1, Some("b"), Some("g"), "{\"y\""),
            piece(0, Some("a"), Some("f"), "{}"),
            piece(1, None, None, ":2}"),
        ] {
            assembly.push(&d);
        }
        let calls = assembly.finish();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].arguments.as_str()),
            ("a", "{}")
        );
        assert_eq!(
            (calls[1].name.as_str(), calls[1].arguments.as_str()),
            ("g", "{\"y\":2}")
        );
    }

    #[test]
    fn cached_prompt_tokens_cost_the_cached_price() {
        let price = router_core::config::Price::flat(router_core::config::Rates {
            cached_input_per_mtok: Some(0.5),
            ..router_core::config::Rates::new(2.0, 8.0)
        });
        let usage = Usage {
            cached_prompt_tokens: 600,
            ..Usage::new(1000, 100)
        };
        let want = (400.0 * 2.0 + 600.0 * 0.5 + 100.0 * 8.0) / 1e6;
        assert!((usage.cost(&price) - want).abs() < 1e-15);
        // Without a cached price, cached tokens cost the input price.
        let plain = router_core::config::Price::new(2.0, 8.0);
        assert!((usage.cost(&plain) - (1000.0 * 2.0 + 100.0 * 8.0) / 1e6).abs() < 1e-15);
    }
}
