//! A model's kind checked, with what depends on it: an embedding model lists no chat
//! capabilities, sets no `max_output_tokens`, is not served by Anthropic (which has no
//! embeddings API), and alone may set `dimensions`.

use super::checks::{Ctx, EMBEDDING, line};
use crate::config::capabilities::Capabilities;
use crate::config::error::ConfigError;
use crate::config::kind::ModelKind;
use crate::config::raw::{At, RawModel};
use crate::config::values::Api;

/// A model's kind, its capabilities (none for an embedding model) and its `dimensions`.
pub(crate) struct Kind {
    pub(crate) kind: ModelKind,
    pub(crate) capabilities: Capabilities,
    pub(crate) dimensions: Option<u32>,
}

/// The kind of the model at `path` (served over `api`): its `kind:`, else `embedding` when its
/// `capabilities` list it, else chat. `capabilities` are the chat capabilities checked already
/// (its wire format's defaults when it lists none).
pub(crate) fn kind(
    ctx: &Ctx<'_>,
    path: &str,
    api: Api,
    raw: &RawModel,
    capabilities: Capabilities,
) -> Result<Kind, ConfigError> {
    let listed = raw
        .capabilities
        .iter()
        .flat_map(|l| l.value.iter())
        .find(|c| c.value == EMBEDDING);
    let kind = match (&raw.kind, listed) {
        (Some(written), listed) => {
            let kind = named(ctx, path, written)?;
            if let (ModelKind::Chat, Some(cap)) = (kind, listed) {
                let msg = format!(
                    "`{EMBEDDING}` makes this an embedding model, but its `kind` is `chat`; \
                     remove one of them"
                );
                return Err(ctx.invalid(&format!("{path}.capabilities"), line(cap), msg));
            }
            kind
        }
        (None, Some(_)) => ModelKind::Embedding,
        (None, None) => ModelKind::Chat,
    };
    let capabilities = match kind {
        ModelKind::Embedding => embedding(ctx, path, api, raw, capabilities)?,
        ModelKind::Chat => capabilities,
    };
    let dimensions = dimensions(ctx, path, kind, raw)?;
    Ok(Kind {
        kind,
        capabilities,
        dimensions,
    })
}

/// `kind:`: `chat` or `embedding`.
fn named(ctx: &Ctx<'_>, path: &str, written: &At<String>) -> Result<ModelKind, ConfigError> {
    ModelKind::from_name(&written.value).ok_or_else(|| {
        let msg = format!(
            "`{}` is not a kind of model; write `chat` or `embedding`",
            written.value
        );
        ctx.invalid(&format!("{path}.kind"), line(written), msg)
    })
}

/// What an embedding model may not have; its capabilities are none.
fn embedding(
    ctx: &Ctx<'_>,
    path: &str,
    api: Api,
    raw: &RawModel,
    capabilities: Capabilities,
) -> Result<Capabilities, ConfigError> {
    let at = raw.kind.as_ref().map_or(line(&raw.name), line);
    if api == Api::Anthropic {
        let msg = format!(
            "`{}` is an embedding model, and Anthropic's API has no embeddings: serve it from \
             an `openai` or `gemini` provider, or remove it",
            raw.name.value
        );
        return Err(ctx.invalid(&format!("{path}.kind"), at, msg));
    }
    let listed = raw.capabilities.is_some();
    if let Some(c) = capabilities.list().first().filter(|_| listed) {
        let msg = format!(
            "an embedding model has no chat capabilities; remove `{}`",
            c.as_str()
        );
        let at = raw.capabilities.as_ref().and_then(line);
        return Err(ctx.invalid(&format!("{path}.capabilities"), at, msg));
    }
    if let Some(v) = &raw.max_output_tokens {
        let msg = "an embedding model writes no output tokens; remove it".to_owned();
        return Err(ctx.invalid(&format!("{path}.max_output_tokens"), line(v), msg));
    }
    Ok(Capabilities::default())
}

/// `dimensions:`, an embedding model's alone: a whole number above zero that fits 32 bits.
fn dimensions(
    ctx: &Ctx<'_>,
    path: &str,
    kind: ModelKind,
    raw: &RawModel,
) -> Result<Option<u32>, ConfigError> {
    let Some(v) = &raw.dimensions else {
        return Ok(None);
    };
    let field = format!("{path}.dimensions");
    if kind == ModelKind::Chat {
        let msg = "only an embedding model has `dimensions`; remove it, or set \
                   `kind: embedding`"
            .to_owned();
        return Err(ctx.invalid(&field, line(v), msg));
    }
    let hint = "write the model's vector size, e.g. 1536, or remove it";
    let n = ctx.positive(&field, v, hint)?.get();
    u32::try_from(n).map(Some).map_err(|_| {
        let msg = format!("{n} is more than any model's vectors hold; {hint}");
        ctx.invalid(&field, line(v), msg)
    })
}

#[cfg(test)]
#[path = "kind_tests.rs"]
mod tests;
