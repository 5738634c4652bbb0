//! A Responses request's `input`, read into the router's messages.
//!
//! - A string is one user message.
//! - `message` items (or items with only a `role` and `content`): `user` and `assistant`
//!   messages as they are, `system` and `developer` ones as system messages. Text parts
//!   (`input_text`, `output_text`, `refusal`) are text, `input_image` parts images.
//! - An assistant `message` and the `function_call`s after it are one assistant turn making
//!   those calls; a `function_call_output` is the tool message answering its call.
//! - A `reasoning` item whose `encrypted_content` llmroute wrote gives its thought back to the
//!   assistant turn after it; OpenAI's own encrypted reasoning no other API can take: it is
//!   left out quietly.
//! - `item_reference` points into a stored response, and the gateway stores none: 400. Other
//!   items (`custom_tool_call`, `web_search_call`, Codex's `additional_tools`, ...) and content
//!   parts (`input_file`, `input_audio`) are left out and listed as dropped. Item `id`s and
//!   `status`es are read past.

use router_sdk::{ImageDetail, Message, Part, Role, Thought, ToolCall};
use serde::Deserialize;
use serde_json::Value;

use super::thought::{self, Decoded};
use super::tools::{fits, flat, kind};
use super::typed;

#[derive(Debug, Deserialize)]
struct InMessage {
    role: InRole,
    content: Content,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum InRole {
    User,
    Assistant,
    System,
    Developer,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct FunctionCall {
    call_id: String,
    name: String,
    #[serde(default)]
    arguments: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
struct FunctionCallOutput {
    call_id: String,
    output: Content,
}

#[derive(Debug, Deserialize)]
struct Reasoning {
    #[serde(default)]
    encrypted_content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Text {
    text: String,
}

#[derive(Debug, Deserialize)]
struct Refusal {
    refusal: String,
}

#[derive(Debug, Deserialize)]
struct InputImage {
    #[serde(default)]
    image_url: Option<String>,
    #[serde(default)]
    detail: Option<String>,
}

/// The messages of `items`, listing in `dropped` what was left out.
pub(super) fn items(items: Vec<Value>, dropped: &mut Vec<String>) -> Result<Vec<Message>, String> {
    let mut talk = Conversation::default();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = match item.get("type") {
            None if item.get("role").is_some() => "message",
            _ => kind(&item, &at)?,
        };
        match kind {
            "message" => message(typed(item, &at)?, &at, &mut talk, dropped)?,
            "function_call" => {
                let call: FunctionCall = typed(item, &at)?;
                let name = match call.namespace {
                    Some(namespace) => flat(&namespace, &call.name),
                    None => call.name,
                };
                talk.call(ToolCall {
                    id: call.call_id,
                    name,
                    arguments: call.arguments,
                });
            }
            "function_call_output" => {
                let output: FunctionCallOutput = typed(item, &at)?;
                let parts = content(output.output, &format!("{at}.output"), dropped)?;
                let result = Message {
                    content: parts,
                    ..Message::tool_result(output.call_id, "")
                };
                talk.push(result);
            }
            "reasoning" => {
                let reasoning: Reasoning = typed(item, &at)?;
                match reasoning.encrypted_content.as_deref().map(thought::decode) {
                    Some(Decoded::Thought(t)) => talk.thought(t),
                    Some(Decoded::Malformed) => dropped.push(format!("{at}:reasoning")),
                    Some(Decoded::Foreign) | None => {}
                }
            }
            "item_reference" => {
                return Err(format!(
                    "`{at}`: an `item_reference` points into a stored response, and this \
                     gateway stores none (`store`): send the item itself"
                ));
            }
            other => {
                let other = if fits(other) { other } else { "unknown" };
                dropped.push(format!("{at}:{other}"));
            }
        }
    }
    Ok(talk.finish())
}

/// A `message` item.
fn message(
    m: InMessage,
    at: &str,
    talk: &mut Conversation,
    dropped: &mut Vec<String>,
) -> Result<(), String> {
    let parts = content(m.content, &format!("{at}.content"), dropped)?;
    let role = match m.role {
        InRole::Assistant => {
            talk.said(parts);
            return Ok(());
        }
        InRole::User => Role::User,
        InRole::System | InRole::Developer => Role::System,
    };
    if !parts.is_empty() {
        talk.push(Message {
            content: parts,
            ..Message::text(role, "")
        });
    }
    Ok(())
}

/// A message's or a tool output's content at `at`: a string, or parts.
fn content(content: Content, at: &str, dropped: &mut Vec<String>) -> Result<Vec<Part>, String> {
    let parts = match content {
        Content::Text(text) => return Ok(vec![Part::Text { text }]),
        Content::Parts(parts) => parts,
    };
    let mut out = Vec::new();
    for (j, part) in parts.into_iter().enumerate() {
        let at = format!("{at}[{j}]");
        match kind(&part, &at)? {
            "input_text" | "output_text" | "text" => {
                let Text { text } = typed(part, &at)?;
                out.push(Part::Text { text });
            }
            "refusal" => {
                let Refusal { refusal } = typed(part, &at)?;
                out.push(Part::Text { text: refusal });
            }
            "input_image" => {
                let image: InputImage = typed(part, &at)?;
                // An image by `file_id` is in OpenAI's file store, which no other API reads.
                let Some(url) = image.image_url else {
                    dropped.push(format!("{at}:input_image"));
                    continue;
                };
                let image_at = format!("`{at}.image_url`");
                let picture =
                    crate::inbound::image(&url).map_err(|e| format!("{image_at}: {e}"))?;
                out.push(Part::Image {
                    image: picture,
                    detail: image.detail.as_deref().and_then(detail),
                });
            }
            other => {
                let other = if fits(other) { other } else { "unknown" };
                dropped.push(format!("{at}:{other}"));
            }
        }
    }
    Ok(out)
}

/// An image's `detail`; one the router has no name for is the provider's default.
fn detail(name: &str) -> Option<ImageDetail> {
    match name {
        "auto" => Some(ImageDetail::Auto),
        "low" => Some(ImageDetail::Low),
        "high" => Some(ImageDetail::High),
        _ => None,
    }
}

/// The messages so far, the assistant turn being built, and the thoughts waiting for it.
#[derive(Debug, Default)]
struct Conversation {
    messages: Vec<Message>,
    turn: Option<Message>,
    thoughts: Vec<Thought>,
}

impl Conversation {
    /// A message of the caller's, a system's or a tool's: it ends the assistant's turn.
    fn push(&mut self, message: Message) {
        self.close();
        self.thoughts.clear();
        self.messages.push(message);
    }

    /// An assistant message: it starts a turn.
    fn said(&mut self, content: Vec<Part>) {
        self.close();
        self.turn().content = content;
    }

    /// A call the assistant made: part of its turn.
    fn call(&mut self, call: ToolCall) {
        self.turn().tool_calls.push(call);
    }

    /// A thought, for the assistant turn after it.
    fn thought(&mut self, thought: Thought) {
        self.thoughts.push(thought);
    }

    /// The turn being built (a new one if none is), holding the thoughts before it.
    fn turn(&mut self) -> &mut Message {
        let turn = self
            .turn
            .get_or_insert_with(|| Message::assistant_calls("", Vec::new()));
        turn.thinking.append(&mut self.thoughts);
        turn
    }

    /// Ends the turn being built; a turn that said nothing and called nothing is left out.
    fn close(&mut self) {
        if let Some(turn) = self.turn.take()
            && (!turn.content.is_empty() || !turn.tool_calls.is_empty())
        {
            self.messages.push(turn);
        }
    }

    fn finish(mut self) -> Vec<Message> {
        self.close();
        self.messages
    }
}
