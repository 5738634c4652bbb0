//! An OpenAI chat-completions request body, read into a [`ChatRequest`]. Fields the router has no
//! place for go to `extra_body`, passed to the provider as given (what the OpenAI SDKs'
//! `extra_body` does); a field of the wrong shape is an error naming it. An optional field sent
//! as `null` is the same as one left out (OpenAI's API documents them as nullable, and clients
//! send `null`s), passed-on fields included.

use std::collections::BTreeMap;

use router_sdk::{
    ChatRequest, Effort, Image, ImageDetail, Message, Part, ResponseFormat, Role, Tool, ToolCall,
    ToolChoice,
};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::ingress::Read;

/// What the gateway reads of a request body.
#[derive(Debug, Deserialize)]
pub(crate) struct Body {
    model: String,
    messages: Vec<InMessage>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    seed: Option<i64>,
    #[serde(default)]
    presence_penalty: Option<f64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(default, deserialize_with = "null_as_default")]
    tools: Vec<InTool>,
    #[serde(default)]
    tool_choice: Option<InToolChoice>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    response_format: Option<InFormat>,
    #[serde(default)]
    reasoning_effort: Option<Effort>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    metadata: BTreeMap<String, String>,
    #[serde(default)]
    n: Option<u32>,
    /// Whether to stream the answer.
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default, deserialize_with = "null_as_default")]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct InMessage {
    role: InRole,
    #[serde(default)]
    content: Option<InContent>,
    #[serde(default, deserialize_with = "null_as_default")]
    tool_calls: Vec<InToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum InRole {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum InContent {
    Text(String),
    Parts(Vec<InPart>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Deserialize)]
struct ImageUrl {
    url: String,
    #[serde(default)]
    detail: Option<ImageDetail>,
}

#[derive(Debug, Deserialize)]
struct InToolCall {
    id: String,
    function: InFunctionCall,
}

#[derive(Debug, Deserialize)]
struct InFunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Debug, Deserialize)]
struct InTool {
    function: InFunction,
}

#[derive(Debug, Deserialize)]
struct InFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default = "empty_object", deserialize_with = "null_as_empty_object")]
    parameters: Value,
    #[serde(default)]
    strict: Option<bool>,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// A field whose `null` is the same as leaving it out: its default.
fn null_as_default<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

/// A JSON Schema whose `null` is the same as leaving it out: `{}`.
fn null_as_empty_object<'de, D>(de: D) -> Result<Value, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<Value>::deserialize(de)?.unwrap_or_else(empty_object))
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum InToolChoice {
    Mode(String),
    Named { function: NamedFunction },
}

#[derive(Debug, Deserialize)]
struct NamedFunction {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: InSchema },
}

#[derive(Debug, Deserialize)]
struct InSchema {
    name: String,
    #[serde(default = "empty_object", deserialize_with = "null_as_empty_object")]
    schema: Value,
    #[serde(default)]
    strict: Option<bool>,
}

/// Reads `bytes` as a chat-completions body; `Err` names the field and what is wrong. The body
/// is one JSON value and nothing after it but whitespace: a parser in front of the gateway that
/// reads `{..}{..}` or `{..}xx` otherwise than this one would see another request.
pub(crate) fn read(bytes: &[u8]) -> Result<Read, String> {
    let body: Body = crate::body::parse(bytes, "a chat-completions request")?;
    body.into_read()
}

impl Body {
    fn into_read(self) -> Result<Read, String> {
        if self.n.is_some_and(|n| n != 1) {
            return Err("`n`: only one choice per request is supported; send n = 1".into());
        }
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| message(i, m))
            .collect::<Result<_, _>>()?;
        let tool_choice = match self.tool_choice {
            None => None,
            Some(InToolChoice::Named { function }) => Some(ToolChoice::Function(function.name)),
            Some(InToolChoice::Mode(mode)) => Some(match mode.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                other => {
                    return Err(format!(
                        "`tool_choice`: `{other}` is not `auto`, `none`, `required` or a named \
                         function"
                    ));
                }
            }),
        };
        let response_format = self.response_format.map(|f| match f {
            InFormat::Text => ResponseFormat::Text,
            InFormat::JsonObject => ResponseFormat::JsonObject,
            InFormat::JsonSchema { json_schema } => ResponseFormat::JsonSchema {
                name: json_schema.name,
                schema: json_schema.schema,
                strict: json_schema.strict.unwrap_or(false),
            },
        });
        let request = ChatRequest {
            model: Some(self.model),
            messages,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            temperature: self.temperature,
            top_p: self.top_p,
            stop: match self.stop {
                None => Vec::new(),
                Some(Stop::One(s)) => vec![s],
                Some(Stop::Many(v)) => v,
            },
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            tools: self
                .tools
                .into_iter()
                .map(|t| Tool {
                    name: t.function.name,
                    description: t.function.description,
                    parameters: t.function.parameters,
                    strict: t.function.strict.unwrap_or(false),
                })
                .collect(),
            tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            response_format,
            reasoning: self.reasoning_effort.map(|effort| router_sdk::Reasoning {
                effort: Some(effort),
                budget_tokens: None,
            }),
            user: self.user,
            metadata: self.metadata,
            // A passed-on `null` is left out too: the provider's default is what it means.
            extra_body: self
                .extra
                .into_iter()
                .filter(|(_, value)| !value.is_null())
                .collect(),
            ..ChatRequest::default()
        };
        Ok(Read {
            request,
            stream: self.stream,
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
            dropped: Vec::new(),
        })
    }
}

fn message(i: usize, m: InMessage) -> Result<Message, String> {
    let role = match m.role {
        InRole::System | InRole::Developer => Role::System,
        InRole::User => Role::User,
        InRole::Assistant => Role::Assistant,
        InRole::Tool => Role::Tool,
    };
    let content = match m.content {
        None => Vec::new(),
        Some(InContent::Text(text)) => vec![Part::Text { text }],
        Some(InContent::Parts(parts)) => parts
            .into_iter()
            .map(|p| match p {
                InPart::Text { text } => Ok(Part::Text { text }),
                InPart::ImageUrl { image_url } => image(&image_url.url)
                    .map(|image| Part::Image {
                        image,
                        detail: image_url.detail,
                    })
                    .map_err(|why| format!("`messages[{i}].content`: {why}")),
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(Message {
        role,
        content,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| ToolCall {
                id: c.id,
                name: c.function.name,
                arguments: c.function.arguments,
            })
            .collect(),
        tool_call_id: m.tool_call_id,
        thinking: Vec::new(),
        cache: false,
    })
}

/// An image URL: a `data:` URL of base64 bytes, or a URL the provider fetches.
pub(crate) fn image(url: &str) -> Result<Image, String> {
    let Some(data) = url.strip_prefix("data:") else {
        return Ok(Image::Url {
            url: url.to_owned(),
        });
    };
    match data.split_once(";base64,") {
        Some((media_type, bytes)) if !media_type.is_empty() => Ok(Image::Base64 {
            media_type: media_type.to_owned(),
            data: bytes.to_owned(),
        }),
        _ => Err("an image `data:` URL must be `data:MEDIA/TYPE;base64,...`".into()),
    }
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
