//! What a request asks for, before any ledger or provider: a chat's checks and size, and for
//! every request ([`Asked`]) its route and the deployments that can serve it. Every driver plans
//! through [`Router::plan`], which calls these, so a request is checked and routed the same way
//! whoever sends it.
//!
//! [`Router::plan`]: crate::Router

use router_core::config::{
    Capability, DeploymentId, ModelKind, Registry, RouteMatch, Subject, needed,
};
use router_core::estimate::PromptSize;
use router_core::prompt_cache::{PrefixHasher, PrefixHashes};

use crate::asked::{Asked, Wants};
use crate::error::Error;
use crate::types::{ChatRequest, Image, Part, ResponseFormat, Role};

/// A chat request, checked, as the flow sees it.
pub(crate) fn asked(req: &ChatRequest) -> Result<Asked<'_>, Error> {
    check(req)?;
    Ok(Asked {
        model: req.model.as_deref(),
        wants: Wants::Chat {
            features: req.features(),
            max_tokens: req.max_tokens,
        },
        prompt: req.prompt_size(),
        providers: &req.providers,
        tenant: req.tenant.as_deref(),
        key_id: req.key_id.as_deref(),
        key_account: req.key_account.as_ref(),
        request_id: req.request_id.as_deref(),
        priority: req.priority,
        deadline: req.deadline,
        headers: &req.headers,
        trace: req.trace,
        metadata: &req.metadata,
        prefixes: prefix_hashes(req),
    })
}

/// The prompt's size: the characters of every text part, tool call, tool-call id, tool
/// definition (name, description, parameters as JSON) and response schema, and its images.
pub(crate) fn prompt_size(req: &ChatRequest) -> PromptSize {
    let chars = |s: &str| s.chars().count() as u64;
    let json = |v: &serde_json::Value| v.to_string().chars().count() as u64;
    let mut size = PromptSize::default();
    for m in &req.messages {
        for part in &m.content {
            match part {
                Part::Text { text } => size.chars += chars(text),
                Part::Image { .. } => size.images += 1,
            }
        }
        for call in &m.tool_calls {
            size.chars += chars(&call.id) + chars(&call.name) + chars(&call.arguments);
        }
        size.chars += m.tool_call_id.as_deref().map_or(0, chars);
    }
    for tool in &req.tools {
        size.chars += chars(&tool.name)
            + tool.description.as_deref().map_or(0, chars)
            + json(&tool.parameters);
    }
    if let Some(ResponseFormat::JsonSchema { name, schema, .. }) = &req.response_format {
        size.chars += chars(name) + json(schema);
    }
    size
}

/// The hashes of the prompt's prefixes ([`PrefixHashes`]), when it marks a cache breakpoint
/// (a message with `cache`): the tools first, then each message, as Anthropic caches them.
/// Every byte that reaches the provider counts: a prompt that differs anywhere before a
/// breakpoint is another prefix.
pub(crate) fn prefix_hashes(req: &ChatRequest) -> Option<PrefixHashes> {
    if !req.messages.iter().any(|m| m.cache) {
        return None;
    }
    let mut h = PrefixHasher::default();
    for tool in &req.tools {
        h.write(tool.name.as_bytes());
        h.write(tool.description.as_deref().unwrap_or_default().as_bytes());
        h.write(tool.parameters.to_string().as_bytes());
    }
    h.end_part(false);
    for m in &req.messages {
        h.write(&[m.role as u8]);
        for thought in &m.thinking {
            h.write(thought.text.as_bytes());
            h.write(thought.signature.as_deref().unwrap_or_default().as_bytes());
            h.write(thought.redacted.as_deref().unwrap_or_default().as_bytes());
        }
        for part in &m.content {
            match part {
                Part::Text { text } => h.write(text.as_bytes()),
                Part::Image { image, .. } => match image {
                    Image::Url { url } => h.write(url.as_bytes()),
                    Image::Base64 { data, .. } => h.write(data.as_bytes()),
                },
            }
        }
        for call in &m.tool_calls {
            h.write(call.id.as_bytes());
            h.write(call.name.as_bytes());
            h.write(call.arguments.as_bytes());
        }
        h.write(m.tool_call_id.as_deref().unwrap_or_default().as_bytes());
        h.end_part(m.cache);
    }
    Some(h.finish())
}

/// Whether `id` may be a request's id: it holds no control character (it goes into traces and
/// the usage records, and PostgreSQL's text takes no NUL).
pub fn is_request_id(id: &str) -> bool {
    !id.chars().any(char::is_control)
}

/// A request's `request_id`, when it has one, checked ([`is_request_id`]).
pub(crate) fn check_id(request_id: Option<&str>) -> Result<(), Error> {
    match request_id.filter(|id| !is_request_id(id)) {
        Some(id) => Err(Error::InvalidRequest(format!(
            "request_id {id:?} holds a control character; remove it"
        ))),
        None => Ok(()),
    }
}

/// Checks what no provider would accept, so it fails here, clearly, before any call.
pub(crate) fn check(req: &ChatRequest) -> Result<(), Error> {
    let invalid = |msg: String| Err(Error::InvalidRequest(msg));
    if req.messages.is_empty() {
        return invalid("a chat needs at least one message".into());
    }
    for (i, m) in req.messages.iter().enumerate() {
        if m.role == Role::Tool && m.tool_call_id.is_none() {
            return invalid(format!(
                "messages[{i}] is a tool result without `tool_call_id`; set the id of the call \
                 it answers"
            ));
        }
        if m.role != Role::Assistant && !m.tool_calls.is_empty() {
            return invalid(format!(
                "messages[{i}] has tool calls but is not an assistant message; only the \
                 assistant makes tool calls"
            ));
        }
        for call in &m.tool_calls {
            if serde_json::from_str::<serde_json::Map<_, _>>(&call.arguments).is_err() {
                return invalid(format!(
                    "messages[{i}]: the arguments of tool call `{}` ({}) are not a JSON object; \
                     send them as the model wrote them, or `{{}}`",
                    call.id, call.name
                ));
            }
        }
    }
    for (i, tool) in req.tools.iter().enumerate() {
        if !is_function_name(&tool.name) {
            return invalid(format!(
                "tools[{i}]: name `{}` must be 1 to 64 letters, digits, `_` or `-`",
                tool.name
            ));
        }
        if !tool.parameters.is_object() {
            return invalid(format!(
                "tools[{i}] (`{}`): `parameters` must be a JSON Schema object, e.g. \
                 {{\"type\": \"object\", \"properties\": {{}}}}",
                tool.name
            ));
        }
    }
    if let Some(crate::types::ToolChoice::Function(name)) = &req.tool_choice
        && !req.tools.iter().any(|t| &t.name == name)
    {
        return invalid(format!(
            "tool_choice names function `{name}`, which is not among the request's tools"
        ));
    }
    if let Some(name) = counted_field(&req.extra_body) {
        return invalid(format!(
            "extra_body field `{name}` is one llmroute writes itself: what it holds decides \
             the model, the tokens admission reserves or how usage is reported, so it cannot \
             be replaced; set it through the request's own fields (messages, max_tokens, \
             tools, stream) or leave it out"
        ));
    }
    if let Some(ResponseFormat::JsonSchema { name, schema, .. }) = &req.response_format {
        if !schema.is_object() {
            return invalid("response_format: the JSON schema must be a JSON object".into());
        }
        if !is_function_name(name) {
            return invalid(format!(
                "response_format: the schema's name `{name}` must be 1 to 64 letters, digits, \
                 `_` or `-`"
            ));
        }
    }
    Ok(())
}

/// Body fields no `extra_body` may replace, in any wire format: the model; the prompt (OpenAI's
/// `messages`, Anthropic's `system`, Gemini's `contents` and system instruction, the tools of
/// each); the output cap and the number of answers (`max_tokens`, `max_completion_tokens`,
/// `n`); and streaming, which decides how usage is reported. Admission reserved for the request
/// as llmroute wrote it, so the provider must count that. Gemini's generation config may come
/// (it carries `topK` and the like, merged into llmroute's), but not its [`COUNTED_CONFIG`].
const COUNTED_FIELDS: &[&str] = &[
    "model",
    "messages",
    "system",
    "contents",
    "systemInstruction",
    "system_instruction",
    "tools",
    "functions",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n",
    "best_of",
    "stream",
    "stream_options",
];

/// Gemini generation config fields no `extra_body` may set: the output cap and the number of
/// answers.
const COUNTED_CONFIG: &[&str] = &[
    "maxOutputTokens",
    "max_output_tokens",
    "candidateCount",
    "candidate_count",
];

/// The first field of `extra` llmroute will not take from it, as a path (`max_tokens`,
/// `generationConfig.maxOutputTokens`).
fn counted_field(extra: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    extra.iter().find_map(|(name, value)| {
        if COUNTED_FIELDS.contains(&name.as_str()) {
            return Some(name.clone());
        }
        let config = matches!(name.as_str(), "generationConfig" | "generation_config");
        let inner = value.as_object().filter(|_| config)?;
        let counted = inner
            .keys()
            .find(|k| COUNTED_CONFIG.contains(&k.as_str()))?;
        Some(format!("{name}.{counted}"))
    })
}

/// `^[a-zA-Z0-9_-]{1,64}$`: what every provider takes as a function's (and a schema's) name.
fn is_function_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The model a request goes to: the one it names, or for a routed alias the model of the first
/// rule it matches (with the match, for `preview` and traces).
pub(crate) fn route(
    registry: &Registry,
    asked: &Asked<'_>,
    named: &str,
) -> Result<(String, Option<RouteMatch>), Error> {
    let tier = asked
        .tenant
        .and_then(|t| registry.tier_of(t))
        .map(|t| t.name.as_str());
    let subject = Subject {
        prompt_tokens: asked.prompt.base_tokens(),
        features: asked.wants.features(),
        tier,
        priority: asked.priority,
    };
    registry.routes.resolve(named, &subject).map_err(|_| {
        Error::InvalidRequest(format!(
            "no rule of route `{named}` matches this request (prompt estimate {} tokens, \
             tools: {}, images: {}); add a last rule without `when` to catch the rest",
            subject.prompt_tokens, subject.features.tools, subject.features.images
        ))
    })
}

/// `candidates` of `model` left after the request's `providers` restriction, its kind (a chat
/// goes only to chat models, embeddings only to embedding models) and what it needs of them
/// (a chat's features, an embedding request's token ids and dimensions). An error names the
/// unknown provider, the model and its kind, or what the models lack.
pub(crate) fn servable(
    registry: &Registry,
    asked: &Asked<'_>,
    model: &str,
    candidates: Vec<DeploymentId>,
) -> Result<Vec<DeploymentId>, Error> {
    for name in asked.providers {
        if !registry.providers.iter().any(|p| &p.name == name) {
            let known: Vec<&str> = registry.providers.iter().map(|p| p.name.as_str()).collect();
            return Err(Error::InvalidRequest(format!(
                "providers: `{name}` is not a configured provider; use any of: {}",
                known.join(", ")
            )));
        }
    }
    let kind = asked.wants.kind();
    let (same, other): (Vec<_>, Vec<_>) = candidates
        .into_iter()
        .partition(|&d| registry.deployment(d).kind == kind);
    if same.is_empty() {
        return Err(wrong_kind(registry, model, kind, &other));
    }
    let allowed: Vec<DeploymentId> = same
        .into_iter()
        .filter(|&d| {
            asked.providers.is_empty() || asked.providers.contains(&registry.provider_of(d).name)
        })
        .collect();
    if allowed.is_empty() {
        return Err(Error::InvalidRequest(format!(
            "none of the model's deployments is at the providers the request allows ({})",
            asked.providers.join(", ")
        )));
    }
    match asked.wants {
        Wants::Chat { features, .. } => capable(registry, features, allowed),
        Wants::Embeddings {
            token_ids,
            dimensions,
        } => crate::embed::servable(registry, token_ids, dimensions, allowed),
    }
}

/// The error of a request for `model`, whose deployments (`theirs`) are all of the other kind
/// than `wanted`: it names the model, its kind, and the models of the kind wanted.
fn wrong_kind(
    registry: &Registry,
    model: &str,
    wanted: ModelKind,
    theirs: &[DeploymentId],
) -> Error {
    let is = theirs
        .first()
        .map_or(ModelKind::Chat, |&d| registry.deployment(d).kind);
    let mut fitting: Vec<&str> = Vec::new();
    for d in registry.deployments.iter().filter(|d| d.kind == wanted) {
        if !fitting.contains(&d.model.as_str()) {
            fitting.push(&d.model);
        }
    }
    let request = match wanted {
        ModelKind::Chat => "a chat request",
        ModelKind::Embedding => "an embeddings request",
    };
    let instead = if fitting.is_empty() {
        format!("no {wanted} model is configured")
    } else {
        format!("{wanted} models: {}", fitting.join(", "))
    };
    Error::InvalidRequest(format!(
        "model `{model}` is {} {is} model, and this is {request}: name a {wanted} model ({instead})",
        if is == ModelKind::Embedding {
            "an"
        } else {
            "a"
        }
    ))
}

/// `allowed` left after a chat's `features`: a chat goes only to models that have the
/// capabilities they need. An error names the feature and the models that lack it.
fn capable(
    registry: &Registry,
    features: router_core::config::Features,
    allowed: Vec<DeploymentId>,
) -> Result<Vec<DeploymentId>, Error> {
    let (able, unable): (Vec<_>, Vec<_>) = allowed.into_iter().partition(|&d| {
        registry
            .deployment(d)
            .capabilities
            .missing(features)
            .is_empty()
    });
    if able.is_empty() {
        let capability = needed(features)
            .into_iter()
            .find(|&c| {
                unable
                    .iter()
                    .any(|&d| !registry.deployment(d).capabilities.has(c))
            })
            .unwrap_or(Capability::Tools);
        let lacking = unable
            .iter()
            .filter(|&&d| !registry.deployment(d).capabilities.has(capability))
            .map(|&d| registry.deployment_name(d))
            .collect();
        return Err(Error::Unsupported {
            feature: capability.feature().to_owned(),
            capability: capability.as_str().to_owned(),
            lacking,
        });
    }
    Ok(able)
}
