//! The JSON shapes of an Anthropic Messages request body, as the gateway reads them: what
//! llmroute has a place for, and nothing else (unknown fields are read past).

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
pub(super) struct Body {
    pub(super) model: String,
    pub(super) messages: Vec<InMessage>,
    #[serde(default)]
    pub(super) system: Option<System>,
    #[serde(default)]
    pub(super) max_tokens: Option<u64>,
    #[serde(default)]
    pub(super) stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub(super) temperature: Option<f64>,
    #[serde(default)]
    pub(super) top_p: Option<f64>,
    #[serde(default)]
    pub(super) tools: Option<Vec<InTool>>,
    #[serde(default)]
    pub(super) tool_choice: Option<InToolChoice>,
    #[serde(default)]
    pub(super) thinking: Option<InThinking>,
    #[serde(default)]
    pub(super) metadata: Option<InMetadata>,
    #[serde(default)]
    pub(super) stream: Option<bool>,
    #[serde(default)]
    pub(super) output_config: Option<OutputConfig>,
}

/// `output_config`: the effort adaptive thinking takes.
#[derive(Debug, Deserialize)]
pub(super) struct OutputConfig {
    #[serde(default)]
    pub(super) effort: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum System {
    Text(String),
    Blocks(Vec<TextBlock>),
}

#[derive(Debug, Deserialize)]
pub(super) struct TextBlock {
    pub(super) text: String,
    #[serde(default)]
    pub(super) cache_control: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct InMessage {
    pub(super) role: InRole,
    pub(super) content: InContent,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum InRole {
    User,
    Assistant,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum InContent {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<Value>,
    },
    Image {
        source: Source,
        #[serde(default)]
        cache_control: Option<Value>,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
        #[serde(default)]
        cache_control: Option<Value>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<ResultContent>,
        #[serde(default)]
        is_error: Option<bool>,
        #[serde(default)]
        cache_control: Option<Value>,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
}

impl Block {
    /// Whether the block carries a `cache_control` breakpoint.
    pub(super) fn cached(&self) -> bool {
        match self {
            Block::Text { cache_control, .. }
            | Block::Image { cache_control, .. }
            | Block::ToolUse { cache_control, .. }
            | Block::ToolResult { cache_control, .. } => cache_control.is_some(),
            Block::Thinking { .. } | Block::RedactedThinking { .. } => false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Source {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum ResultContent {
    Text(String),
    Blocks(Vec<ResultBlock>),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ResultBlock {
    Text { text: String },
    Image { source: Source },
}

#[derive(Debug, Deserialize)]
pub(super) struct InTool {
    #[serde(default, rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) name: String,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) input_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum InToolChoice {
    Auto {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Any {
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    Tool {
        name: String,
        #[serde(default)]
        disable_parallel_tool_use: Option<bool>,
    },
    None,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum InThinking {
    Enabled {
        #[serde(default)]
        budget_tokens: Option<u64>,
    },
    Disabled,
    /// The model decides how much to think: the router's default budget.
    Adaptive,
}

#[derive(Debug, Deserialize)]
pub(super) struct InMetadata {
    #[serde(default)]
    pub(super) user_id: Option<String>,
}
