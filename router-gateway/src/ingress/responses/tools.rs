//! The tools of a Responses request, and its `tool_choice`.
//!
//! - A `function` tool is a function tool as it is.
//! - A `namespace` tool is flattened into its functions, each named `namespace__name` (Codex's
//!   own flat form); [`Names`] maps those names back, so that answers name the function as the
//!   caller offered it (`name` and `namespace`).
//! - Every other tool (`custom`, `web_search`, `tool_search`, `file_search`, `mcp`, ...) is one
//!   that OpenAI runs or that takes free text: no provider behind a chat-completions,
//!   Anthropic or Gemini API can take it. It is left out and listed as dropped, never refused:
//!   an agent goes on with the tools that remain.

use std::collections::BTreeMap;

use router_sdk::{Tool, ToolChoice};
use serde::Deserialize;
use serde_json::{Value, json};

use super::typed;

#[derive(Debug, Deserialize)]
struct FunctionTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    strict: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct NamespaceTool {
    name: String,
    tools: Vec<Value>,
}

/// The functions of a namespace the router knows by their flat names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Names {
    /// Flat name → (namespace, name).
    flat: BTreeMap<String, (String, String)>,
}

impl Names {
    /// The function the router calls `sent`, as the caller offered it: its namespace (none for
    /// a function offered alone) and its name.
    pub(super) fn caller<'a>(&'a self, sent: &'a str) -> (Option<&'a str>, &'a str) {
        match self.flat.get(sent) {
            Some((namespace, name)) => (Some(namespace), name),
            None => (None, sent),
        }
    }
}

/// The flat name of function `name` of `namespace`: `namespace__name`, without the underscores
/// either side would add to the two of the join.
pub(super) fn flat(namespace: &str, name: &str) -> String {
    let namespace = namespace.trim_end_matches('_');
    let name = name.trim_start_matches('_');
    format!("{namespace}__{name}")
}

/// Whether every provider takes `name` as a function's: `^[a-zA-Z0-9_-]{1,64}$`.
pub(super) fn fits(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The tools offered: the router's, the names of namespaced ones, and the caller's own JSON of
/// those kept (what a response repeats as its `tools`).
#[derive(Debug, Default)]
pub(super) struct Offered {
    pub(super) tools: Vec<Tool>,
    pub(super) names: Names,
    pub(super) echo: Vec<Value>,
}

/// Reads `tools`, listing in `dropped` those left out.
pub(super) fn tools(tools: Vec<Value>, dropped: &mut Vec<String>) -> Result<Offered, String> {
    let mut offered = Offered::default();
    for (i, tool) in tools.into_iter().enumerate() {
        let at = format!("tools[{i}]");
        match kind(&tool, &at)? {
            "function" => {
                offered.tools.push(function(tool.clone(), &at, None)?);
                offered.echo.push(tool);
            }
            "namespace" => namespace(tool, &at, &mut offered, dropped)?,
            other => dropped.push(dropped_name(&at, other, &tool)),
        }
    }
    Ok(offered)
}

/// The `type` of item `value` at `at`.
pub(super) fn kind<'v>(value: &'v Value, at: &str) -> Result<&'v str, String> {
    match value.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        Some(_) => Err(format!("`{at}.type`: not a string")),
        None if value.is_object() => Err(format!("`{at}`: missing field `type`")),
        None => Err(format!("`{at}`: not an object")),
    }
}

/// How a tool left out is listed: where it was, its type, and its name when it has a plain one
/// (`tools[3]:custom:apply_patch`).
fn dropped_name(at: &str, kind: &str, tool: &Value) -> String {
    let kind = if fits(kind) { kind } else { "unknown" };
    match tool.get("name").and_then(Value::as_str).filter(|n| fits(n)) {
        Some(name) => format!("{at}:{kind}:{name}"),
        None => format!("{at}:{kind}"),
    }
}

/// A function tool at `at`, named flat when it is one of `namespace`.
fn function(tool: Value, at: &str, namespace: Option<&str>) -> Result<Tool, String> {
    let f: FunctionTool = typed(tool, at)?;
    let name = match namespace {
        Some(namespace) => flat(namespace, &f.name),
        None => f.name,
    };
    Ok(Tool {
        name,
        description: f.description,
        parameters: f
            .parameters
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        strict: f.strict.unwrap_or(false),
    })
}

/// A `namespace` tool's functions, flat; its other tools, and functions whose flat name no
/// provider takes, are dropped.
fn namespace(
    tool: Value,
    at: &str,
    offered: &mut Offered,
    dropped: &mut Vec<String>,
) -> Result<(), String> {
    let ns: NamespaceTool = typed(tool.clone(), at)?;
    let mut kept = Vec::new();
    for (j, inner) in ns.tools.into_iter().enumerate() {
        let at = format!("{at}.tools[{j}]");
        let kind = kind(&inner, &at)?;
        if kind != "function" {
            dropped.push(dropped_name(&at, kind, &inner));
            continue;
        }
        let f = function(inner.clone(), &at, Some(&ns.name))?;
        if !fits(&f.name) {
            dropped.push(dropped_name(&at, kind, &inner));
            continue;
        }
        let name = inner
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let caller = (ns.name.clone(), name.to_owned());
        offered.names.flat.insert(f.name.clone(), caller);
        offered.tools.push(f);
        kept.push(inner);
    }
    if !kept.is_empty() {
        let mut echo = tool;
        echo["tools"] = Value::Array(kept);
        offered.echo.push(echo);
    }
    Ok(())
}

/// `tool_choice`: `auto`, `none`, `required` or `{type: "function", name}`. A choice of a tool
/// that was left out, or of `allowed_tools` (a subset the router cannot pass on), is left out
/// and listed (the mode of `allowed_tools` is kept).
pub(super) fn tool_choice(
    choice: &Value,
    dropped: &mut Vec<String>,
) -> Result<Option<ToolChoice>, String> {
    let mode = |mode: &str| match mode {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        other => Err(format!(
            "`tool_choice`: `{other}` is not `auto`, `none`, `required` or a tool"
        )),
    };
    match choice {
        Value::Null => Ok(None),
        Value::String(m) => mode(m).map(Some),
        Value::Object(_) => match kind(choice, "tool_choice")? {
            "function" => {
                #[derive(Deserialize)]
                struct Named {
                    name: String,
                    #[serde(default)]
                    namespace: Option<String>,
                }
                let named: Named = typed(choice.clone(), "tool_choice")?;
                let name = match named.namespace {
                    Some(namespace) => flat(&namespace, &named.name),
                    None => named.name,
                };
                Ok(Some(ToolChoice::Function(name)))
            }
            "allowed_tools" => {
                dropped.push("tool_choice:allowed_tools".to_owned());
                let m = choice.get("mode").and_then(Value::as_str).unwrap_or("auto");
                mode(m).map(Some)
            }
            other => {
                dropped.push(dropped_name("tool_choice", other, choice));
                Ok(None)
            }
        },
        _ => Err("`tool_choice`: not a string or an object".to_owned()),
    }
}
