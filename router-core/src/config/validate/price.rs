//! `price:` of a model: USD per million tokens, each positive and finite; cache reads and
//! writes where the provider bills them apart; higher bands for long prompts (`above`).
//!
//! Anthropic bills cache reads at 0.1x the input price, five-minute writes at 1.25x and
//! hour-long writes at 2x: those are an Anthropic model's prices when its file gives none.

use super::checks::{Ctx, line};
use crate::config::error::ConfigError;
use crate::config::kind::ModelKind;
use crate::config::price::{Price, PriceTier, Rates};
use crate::config::raw::{At, Number, RawPrice, RawPriceTier};
use crate::config::values::Api;

/// Anthropic's cache prices, as multiples of the input price: reads, five-minute writes,
/// hour-long writes.
const ANTHROPIC_CACHE: [f64; 3] = [0.1, 1.25, 2.0];

/// The prices one band gives, as written.
struct Given<'a> {
    input: &'a At<Number>,
    output: Option<&'a At<Number>>,
    cached_input: Option<&'a At<Number>>,
    cache_write: Option<&'a At<Number>>,
    cache_write_1h: Option<&'a At<Number>>,
}

/// `price:` of a model of `kind` at `base` of a provider speaking `api`. A chat model's needs
/// `output`; an embedding model writes no output tokens, so its `output` may be absent or 0.
pub(super) fn price(
    ctx: &Ctx<'_>,
    base: &str,
    raw: &At<RawPrice>,
    kind: ModelKind,
    api: Api,
) -> Result<Price, ConfigError> {
    let p = &raw.value;
    let given = Given {
        input: &p.input,
        output: p.output.as_ref(),
        cached_input: p.cached_input.as_ref(),
        cache_write: p.cache_write.as_ref(),
        cache_write_1h: p.cache_write_1h.as_ref(),
    };
    let field = format!("{base}.price");
    let rates = rates(ctx, &field, line(raw), &given, kind, api)?;
    let mut above: Vec<PriceTier> = Vec::new();
    for (i, tier) in p.above.iter().flat_map(|a| a.value.iter()).enumerate() {
        let tier_field = format!("{field}.above[{i}]");
        let t = band(ctx, &tier_field, tier, kind, api)?;
        let floor = above.last().map_or(0, |last| last.prompt_tokens);
        if t.prompt_tokens <= floor && !above.is_empty() {
            let msg = format!(
                "{} is not above the band before it ({floor}); list the bands by growing \
                 `prompt_tokens`",
                t.prompt_tokens
            );
            let at = line(&tier.value.prompt_tokens);
            return Err(ctx.invalid(&format!("{tier_field}.prompt_tokens"), at, msg));
        }
        above.push(t);
    }
    Ok(Price { base: rates, above })
}

/// One entry of `price.above`.
fn band(
    ctx: &Ctx<'_>,
    field: &str,
    raw: &At<RawPriceTier>,
    kind: ModelKind,
    api: Api,
) -> Result<PriceTier, ConfigError> {
    let t = &raw.value;
    let hint = "write the prompt size above which the provider bills this band, e.g. 200000";
    let prompt_tokens = ctx.positive(&format!("{field}.prompt_tokens"), &t.prompt_tokens, hint)?;
    let given = Given {
        input: &t.input,
        output: t.output.as_ref(),
        cached_input: t.cached_input.as_ref(),
        cache_write: t.cache_write.as_ref(),
        cache_write_1h: t.cache_write_1h.as_ref(),
    };
    Ok(PriceTier {
        prompt_tokens: prompt_tokens.get(),
        rates: rates(ctx, field, line(raw), &given, kind, api)?,
    })
}

/// The rates `given` at `field`, with Anthropic's cache prices where an Anthropic model's are
/// not given.
fn rates(
    ctx: &Ctx<'_>,
    field: &str,
    at: Option<u64>,
    given: &Given<'_>,
    kind: ModelKind,
    api: Api,
) -> Result<Rates, ConfigError> {
    let one = |key: &str, value: &At<Number>, zero: bool| {
        let usd = value.value.as_f64().filter(|x| x.is_finite());
        if let Some(usd) = usd.filter(|&x| x > 0.0 || (zero && x == 0.0)) {
            return Ok(usd);
        }
        let least = if zero { "a non-negative" } else { "a positive" };
        let msg = format!(
            "must be {least}, finite price in USD per million tokens, got {}; \
             write the provider's list price, e.g. 0.27",
            value.value
        );
        Err(ctx.invalid(&format!("{field}.{key}"), line(value), msg))
    };
    let optional =
        |key: &str, value: Option<&At<Number>>| value.map(|v| one(key, v, false)).transpose();
    let embedding = kind == ModelKind::Embedding;
    let output = match given.output {
        Some(v) => one("output", v, embedding)?,
        None if embedding => 0.0,
        None => {
            let msg = "missing; a chat model's price needs `input` and `output`, e.g. \
                       `{ input: 0.27, output: 1.10 }` (only an embedding model may leave \
                       `output` out)";
            return Err(ctx.invalid(&format!("{field}.output"), at, msg.to_owned()));
        }
    };
    let input = one("input", given.input, false)?;
    // To a billionth of a dollar: 3 x 0.1 is 0.30000000000000004 in binary.
    let multiple = |m: f64| (input * m * 1e9).round() / 1e9;
    let default = |i: usize| (api == Api::Anthropic).then(|| multiple(ANTHROPIC_CACHE[i]));
    Ok(Rates {
        input_per_mtok: input,
        output_per_mtok: output,
        cached_input_per_mtok: optional("cached_input", given.cached_input)?.or(default(0)),
        cache_write_per_mtok: optional("cache_write", given.cache_write)?.or(default(1)),
        cache_write_1h_per_mtok: optional("cache_write_1h", given.cache_write_1h)?.or(default(2)),
    })
}

#[cfg(test)]
#[path = "price_tests.rs"]
mod tests;
