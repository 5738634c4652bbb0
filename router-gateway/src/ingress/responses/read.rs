//! A Responses request body, read into a [`ChatRequest`].
//!
//! - `instructions` is a system message before the `input` (see [`items`](super::items)).
//! - `tools` and `tool_choice`: see [`tools`](super::tools); with no tool left, neither
//!   `tool_choice` nor `parallel_tool_calls` is passed on (chat-completions APIs refuse them
//!   without tools).
//! - `reasoning.effort` is the router's effort (no effort: no reasoning asked for, so a model
//!   without the `reasoning` capability can serve `reasoning: {summary: "auto"}`);
//!   `max_output_tokens` is `max_tokens`; `text.format` the answer's shape; `user` (else
//!   `safety_identifier`) the end user; `metadata`, `temperature` and `top_p` as they are.
//! - The gateway keeps no responses: `previous_response_id`, `conversation` and `prompt`
//!   (which name something stored) and `background: true` are refused; `store: true` is
//!   read as `false` and listed as dropped.
//! - Read past: `include` (reasoning items always carry their `encrypted_content`),
//!   `reasoning.summary`, `text.verbosity`, `prompt_cache_key`, `client_metadata`,
//!   `service_tier`, `truncation` and fields the gateway does not know.

use std::collections::BTreeMap;

use router_sdk::{ChatRequest, Effort, Message, Reasoning, ResponseFormat};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Asked, Echo, items, tools};
use crate::ingress::Read;

#[derive(Debug, Deserialize)]
struct Body {
    model: String,
    input: Input,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    reasoning: Option<InReasoning>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    text: Option<InText>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    safety_identifier: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    background: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    conversation: Option<Value>,
    #[serde(default)]
    prompt: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct InReasoning {
    #[serde(default)]
    effort: Option<Effort>,
}

#[derive(Debug, Deserialize)]
struct InText {
    #[serde(default)]
    format: Option<InFormat>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        #[serde(default)]
        strict: Option<bool>,
    },
}

/// Reads `bytes` as a Responses body; `Err` names the field and what is wrong.
pub(super) fn read(bytes: &[u8]) -> Result<(Read, Asked), String> {
    let body: Body = crate::body::parse(bytes, "a Responses request")?;
    body.into_read()
}

impl Body {
    fn into_read(self) -> Result<(Read, Asked), String> {
        self.stateless()?;
        let mut dropped = Vec::new();
        if self.store == Some(true) {
            dropped.push("store".to_owned());
        }
        let mut messages: Vec<Message> = self
            .instructions
            .filter(|i| !i.is_empty())
            .map(Message::system)
            .into_iter()
            .collect();
        match self.input {
            Input::Text(text) => messages.push(Message::user(text)),
            Input::Items(list) => messages.extend(items::items(list, &mut dropped)?),
        }
        let offered = tools::tools(self.tools.unwrap_or_default(), &mut dropped)?;
        let choice = self.tool_choice.unwrap_or(Value::Null);
        let (tool_choice, parallel) = if offered.tools.is_empty() {
            (None, None)
        } else {
            let chosen = tools::tool_choice(&choice, &mut dropped)?;
            (chosen, self.parallel_tool_calls)
        };
        let echo = Echo {
            tools: offered.echo,
            tool_choice: if choice.is_null() {
                json!("auto")
            } else {
                choice
            },
            parallel_tool_calls: self.parallel_tool_calls.unwrap_or(true),
        };
        let request = ChatRequest {
            model: Some(self.model),
            messages,
            max_tokens: self.max_output_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            tools: offered.tools,
            tool_choice,
            parallel_tool_calls: parallel,
            response_format: self.text.and_then(|t| t.format).and_then(format),
            reasoning: self
                .reasoning
                .and_then(|r| r.effort)
                .map(|effort| Reasoning {
                    effort: Some(effort),
                    budget_tokens: None,
                }),
            user: self.user.or(self.safety_identifier),
            metadata: self.metadata.unwrap_or_default(),
            ..ChatRequest::default()
        };
        let read = Read {
            request,
            stream: self.stream.unwrap_or(false),
            include_usage: true,
            dropped,
        };
        let asked = Asked {
            names: offered.names,
            echo,
        };
        Ok((read, asked))
    }

    /// Refuses what needs responses kept by the gateway, which keeps none.
    fn stateless(&self) -> Result<(), String> {
        let kept = "this gateway keeps no responses (it reads `store` as false): send the \
                    whole conversation as `input`";
        if self
            .previous_response_id
            .as_deref()
            .is_some_and(|id| !id.is_empty())
        {
            return Err(format!("`previous_response_id`: {kept}"));
        }
        if self.conversation.as_ref().is_some_and(|c| !c.is_null()) {
            return Err(format!("`conversation`: {kept}"));
        }
        if self.prompt.as_ref().is_some_and(|p| !p.is_null()) {
            return Err(
                "`prompt`: this gateway has no stored prompts: send the prompt as \
                 `instructions` and `input`"
                    .to_owned(),
            );
        }
        if self.background == Some(true) {
            return Err(
                "`background`: a background response is kept to be fetched later, and this \
                 gateway keeps no responses: leave `background` out"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

/// The answer's shape; plain text is the default, asked for by nothing.
fn format(format: InFormat) -> Option<ResponseFormat> {
    match format {
        InFormat::Text => None,
        InFormat::JsonObject => Some(ResponseFormat::JsonObject),
        InFormat::JsonSchema {
            name,
            schema,
            strict,
        } => Some(ResponseFormat::JsonSchema {
            name,
            schema,
            strict: strict.unwrap_or(false),
        }),
    }
}
